package cli

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-run/durable/internal/metrics"
	"github.com/durable-run/durable/internal/scheduler"
	"github.com/durable-run/durable/pkg/client"
)

// RunScheduler is the scheduler command: flags, connections, then
// scheduler.Run until ctx ends. Several replicas may run at once.
func RunScheduler(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("scheduler", stderr)
	var c conn
	c.register(fs)
	interval := fs.Duration("interval", time.Second, "time between sweeps of the deadline index")
	stuck := fs.Duration("stuck-after", 5*time.Minute, "re-publish the step of a running run with no progress for this long")
	lease := fs.Duration("lease", 30*time.Second, "how long a claimed deadline is hidden from other schedulers")
	parallel := fs.Int("parallel", 32, "expired waits handled at once")
	retention := fs.Duration("blob-retention", 7*24*time.Hour, "delete the blobs of runs that ended this long ago (0: keep them); keep it longer than you may redrive a dead run")
	metricsAddr := fs.String("metrics", "", metricsUsage)
	fleetEvery := fs.Duration("fleet-interval", 30*time.Second, "with --metrics: time between scans of the runs and consumers for the fleet gauges (each reads every run record)")
	stuckMin := fs.Duration("stuck-min", time.Minute, "with --metrics: least time without progress that counts a running run as stuck (the threshold is 10x its step's p95, at least this)")
	ttlGrace := fs.Duration("ttl-grace", time.Minute, "with --metrics: how long past its deadline a wait counts in durable_waits_past_ttl")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("scheduler: unexpected argument %q", pos[0])
	}
	if *fleetEvery <= 0 || *stuckMin <= 0 || *ttlGrace <= 0 {
		return usagef("scheduler: --fleet-interval, --stuck-min and --ttl-grace must be positive")
	}
	if *parallel < 1 {
		return usagef("scheduler: --parallel %d: want at least 1", *parallel)
	}
	if *retention < 0 {
		return usagef("scheduler: --blob-retention %s: want 0 (keep) or a positive duration", *retention)
	}
	log := newLogger(stderr, "scheduler")
	useRedisLogger(log)
	m := metrics.Default()
	waitReady(m)
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return usageError{err.Error()}
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
	return keepTrying(ctx, log, "scheduler start", func() error {
		s, err := c.open(ctx, "durable-scheduler", log)
		if err != nil {
			return err
		}
		s.ready(m)
		defer s.Close()
		c.warnFewReplicas(ctx, s, log)
		cfg := scheduler.Config{Client: client.New(s.js, s.store), Interval: *interval, StuckAfter: *stuck, Lease: *lease, Parallel: *parallel, Logger: &log}
		if *retention > 0 {
			blobs, err := c.openBlobs(ctx, s)
			if err != nil {
				return fmt.Errorf("--blob-retention: %w", err)
			}
			cfg.Blobs, cfg.BlobRetention = blobs, *retention
		}
		sch, err := scheduler.New(cfg)
		if err != nil {
			return usageError{err.Error()}
		}
		if *metricsAddr == "" {
			return sch.Run(ctx)
		}
		current.Store(sch)
		if fleet == nil {
			fleet, err = m.NewFleet(metrics.FleetConfig{Store: s.store, JetStream: s.js, Interval: *fleetEvery,
				StuckMin: *stuckMin, StuckDefault: *stuck, PastTTLGrace: *ttlGrace, Logger: &log})
			if err != nil {
				return usageError{err.Error()}
			}
		}
		fleet.Use(s.store, s.js)
		fctx, stopFleet := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = fleet.Run(fctx) }()
		defer func() { stopFleet(); wg.Wait() }()
		return sch.Run(ctx)
	})
}
