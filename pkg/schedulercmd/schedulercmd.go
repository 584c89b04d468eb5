// Package schedulercmd is the main of a scheduler binary: every flag,
// variable and endpoint of `durable scheduler` (the connection flags and
// DURABLE_* variables, --interval, --stuck-after, --lease, --parallel,
// --blob-retention, the fleet gauges, /metrics, /healthz and /readyz on
// --metrics, JSON logs at DURABLE_LOG_LEVEL). The scheduler sweeps expired
// waits, timers, stuck runs and dead letters; several may run at once.
// A team that wants one inside its own binary runs Run next to its worker.
//
//	func main() { schedulercmd.Main() }
package schedulercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/service"
)

// Main runs the scheduler with the process's arguments until SIGINT or
// SIGTERM, then exits: 0, 2 for bad flags, 1 for any other error.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "scheduler: %v\n", err)
	}
	os.Exit(service.ExitCode(err))
}

// Run is the scheduler command: it parses args, connects (retrying while
// the servers are away) and sweeps until ctx ends. It returns nil when ctx
// ends, a service.UsageError for bad flags and flag.ErrHelp for -h. Logs
// go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := service.NewFlagSet("scheduler", stderr)
	var c service.Conn
	c.Register(fs)
	interval := fs.Duration("interval", time.Second, "time between sweeps of the deadline index")
	stuck := fs.Duration("stuck-after", 5*time.Minute, "re-publish the step of a running run with no progress for this long")
	lease := fs.Duration("lease", 30*time.Second, "how long a claimed deadline is hidden from other schedulers")
	parallel := fs.Int("parallel", 32, "expired waits handled at once")
	retention := fs.Duration("blob-retention", 7*24*time.Hour, "delete the blobs of runs that ended this long ago (0: keep them); keep it longer than you may redrive a dead run")
	metricsAddr := fs.String("metrics", "", service.MetricsUsage)
	fleetEvery := fs.Duration("fleet-interval", 30*time.Second, "with --metrics: time between scans of the runs and consumers for the fleet gauges (each reads every run record)")
	stuckMin := fs.Duration("stuck-min", time.Minute, "with --metrics: least time without progress that counts a running run as stuck (the threshold is 10x its step's p95, at least this)")
	ttlGrace := fs.Duration("ttl-grace", time.Minute, "with --metrics: how long past its deadline a wait counts in durable_waits_past_ttl")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("scheduler: unexpected argument %q", pos[0])
	}
	if *fleetEvery <= 0 || *stuckMin <= 0 || *ttlGrace <= 0 {
		return service.Usagef("scheduler: --fleet-interval, --stuck-min and --ttl-grace must be positive")
	}
	if *parallel < 1 {
		return service.Usagef("scheduler: --parallel %d: want at least 1", *parallel)
	}
	if *retention < 0 {
		return service.Usagef("scheduler: --blob-retention %s: want 0 (keep) or a positive duration", *retention)
	}
	log := service.NewLogger(stderr, "scheduler")
	service.UseRedisLogger(log)
	m := metrics.Default()
	service.WaitReady(m)
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	defer waitMetrics()
	var (
		current atomic.Pointer[scheduler.Scheduler] // the counters follow a restarted scheduler
		fleet   *metrics.Fleet
	)
	if *metricsAddr != "" {
		// After a reconnect the counters restart from the new
		// scheduler's (Prometheus reads that as a counter reset).
		m.RegisterScheduler(func() scheduler.Stats {
			if s := current.Load(); s != nil {
				return s.Stats()
			}
			return scheduler.Stats{}
		})
	}
	return service.KeepTrying(ctx, log, "scheduler start", func() error {
		s, err := c.Open(ctx, "durable-scheduler", log)
		if err != nil {
			return err
		}
		s.Ready(m)
		defer s.Close()
		c.WarnFewReplicas(ctx, s, log)
		cfg := scheduler.Config{Client: client.New(s.JetStream, s.Store), Interval: *interval, StuckAfter: *stuck, Lease: *lease, Parallel: *parallel, Logger: &log}
		if *retention > 0 {
			blobs, err := c.OpenBlobs(ctx, s)
			if err != nil {
				return fmt.Errorf("--blob-retention: %w", err)
			}
			cfg.Blobs, cfg.BlobRetention = blobs, *retention
		}
		sch, err := scheduler.New(cfg)
		if err != nil {
			return service.UsageError{Msg: err.Error()}
		}
		if *metricsAddr == "" {
			return sch.Run(ctx)
		}
		current.Store(sch)
		if fleet == nil {
			fleet, err = m.NewFleet(metrics.FleetConfig{Store: s.Store, JetStream: s.JetStream, Interval: *fleetEvery,
				StuckMin: *stuckMin, StuckDefault: *stuck, PastTTLGrace: *ttlGrace, Logger: &log})
			if err != nil {
				return service.UsageError{Msg: err.Error()}
			}
		}
		fleet.Use(s.Store, s.JetStream)
		fctx, stopFleet := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = fleet.Run(fctx) }()
		defer func() { stopFleet(); wg.Wait() }()
		return sch.Run(ctx)
	})
}
