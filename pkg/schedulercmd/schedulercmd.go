// Package schedulercmd is the main of a scheduler binary: every flag,
// variable and endpoint of `durable scheduler` (the connection flags and
// DURABLE_* variables, --interval, --stuck-after, --lease, --parallel,
// --blob-retention, the fleet gauges, /metrics, /healthz and /readyz on
// --metrics, JSON logs at DURABLE_LOG_LEVEL). The scheduler sweeps expired
// waits, timers, stuck runs and dead letters; several may run at once.
// A team that wants one inside its worker binary runs Run next to
// workercmd.Run in their own goroutines; both report to metrics.Default(),
// so give --metrics to one of them (its /readyz then follows that one's
// connections).
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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/schedule"
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
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := service.NewLogger(stderr, "scheduler")
	service.UseRedisLogger(log)
	shutdownTracing, err := service.StartTracing(ctx, "durable-scheduler")
	if err != nil {
		return err
	}
	defer service.StopTracing(shutdownTracing)
	m := metrics.Default()
	service.WaitReady(m)
	waitMetrics, err := metrics.Start(ctx, o.metricsAddr, m, log)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	defer waitMetrics()
	r := &runner{o: o, m: m, log: log}
	if o.metricsAddr != "" {
		// After a reconnect the counters restart from the new
		// scheduler's (Prometheus reads that as a counter reset).
		RegisterMetrics(m, r.stats)
	}
	return service.KeepTrying(ctx, log, "scheduler start", func() error { return r.run(ctx) })
}

// options are the flags of `durable scheduler`.
type options struct {
	conn                              service.Conn // registered on the flag set: never copied
	interval, stuck, lease, retention time.Duration
	parallel                          int
	metricsAddr                       string
	fleetEvery, stuckMin, ttlGrace    time.Duration
	stepTimeout                       time.Duration
	runRetention, tombstones          Days
	purgeRate                         int
	purgeShare                        float64
	archive                           bool
	archiveTTL                        Days
}

// Days is a duration flag (flag.Value) that also takes whole days
// ("30d"), as --retention does.
type Days time.Duration

// String prints whole days as days ("30d"), else a Go duration.
func (d *Days) String() string {
	if dur := time.Duration(*d); dur > 0 && dur%(24*time.Hour) == 0 {
		return strconv.Itoa(int(dur/(24*time.Hour))) + "d"
	}
	return time.Duration(*d).String()
}

// Set parses a Go duration or whole days; negative is refused.
func (d *Days) Set(v string) error {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		i, err := strconv.Atoi(n)
		if err != nil || i < 0 {
			return fmt.Errorf("%q: want a Go duration (720h) or whole days (30d)", v)
		}
		*d = Days(time.Duration(i) * 24 * time.Hour)
		return nil
	}
	dur, err := time.ParseDuration(v)
	if err != nil || dur < 0 {
		return fmt.Errorf("%q: want a Go duration (720h) or whole days (30d)", v)
	}
	*d = Days(dur)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := service.NewFlagSet("scheduler", stderr)
	o.conn.Register(fs)
	fs.DurationVar(&o.interval, "interval", time.Second, "time between sweeps of the deadline index")
	fs.DurationVar(&o.stuck, "stuck-after", scheduler.DefaultStepTimeout+5*time.Minute, "re-publish the step of a running run with no progress (a commit, a worker's heartbeat) for this long; must be above --step-timeout")
	fs.DurationVar(&o.stepTimeout, "step-timeout", scheduler.DefaultStepTimeout, "the longest step timeout of the workers (worker.Config.StepTimeout): no step runs longer")
	fs.DurationVar(&o.lease, "lease", 30*time.Second, "how long a claimed deadline is hidden from other schedulers")
	fs.IntVar(&o.parallel, "parallel", 1024, "expired waits handled at once, in claims of up to 256")
	fs.DurationVar(&o.retention, "blob-retention", 7*24*time.Hour, "delete the blobs of runs that ended this long ago (0: keep them); keep it longer than you may redrive a dead run")
	o.runRetention, o.tombstones = Days(scheduler.DefaultRetention), Days(scheduler.DefaultTombstoneRetention)
	if v := os.Getenv("DURABLE_RETENTION"); v != "" {
		if err := o.runRetention.Set(v); err != nil {
			return nil, service.Usagef("scheduler: DURABLE_RETENTION %v", err)
		}
	}
	fs.Var(&o.runRetention, "retention", "purge the runs that ended this long ago (30d, 720h; 0 keeps every run), leaving a tombstone; default 30d, or DURABLE_RETENTION")
	fs.IntVar(&o.purgeRate, "purge-rate", scheduler.DefaultPurgeRate, "purge at most this many ended runs a second")
	fs.Float64Var(&o.purgeShare, "purge-share", scheduler.DefaultPurgeShare, "the share of the time the purge works, in (0, 1]: it rests between chunks of runs so that the store serves the live work (1: never rests)")
	fs.BoolVar(&o.archive, "archive", os.Getenv("DURABLE_ARCHIVE") == "1", "before purging a run, write it with its checkpoints and audit to the Object Store bucket "+client.ArchiveBucket+" (one gzipped JSON document), which durable runs show reads; or DURABLE_ARCHIVE=1")
	fs.Var(&o.archiveTTL, "archive-retention", "with --archive, when it creates the bucket: keep an archived run this long (0: for ever)")
	fs.Var(&o.tombstones, "tombstone-retention", "keep a purged run's tombstone (its id taken, `runs show` says when it ended) this long")
	fs.StringVar(&o.metricsAddr, "metrics", "", service.MetricsUsage)
	fs.DurationVar(&o.fleetEvery, "fleet-interval", 30*time.Second, "with --metrics: time between scans of the fleet gauges (each reads the run index's counters, the live runs and the consumers)")
	fs.DurationVar(&o.stuckMin, "stuck-min", time.Minute, "with --metrics: least time without progress that counts a running run as stuck (the threshold is 10x its step's p95, at least this)")
	fs.DurationVar(&o.ttlGrace, "ttl-grace", time.Minute, "with --metrics: how long past its deadline a wait counts in durable_waits_past_ttl")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, service.Usagef("scheduler: unexpected argument %q", pos[0])
	}
	if o.fleetEvery <= 0 || o.stuckMin <= 0 || o.ttlGrace <= 0 {
		return nil, service.Usagef("scheduler: --fleet-interval, --stuck-min and --ttl-grace must be positive")
	}
	if o.parallel < 1 {
		return nil, service.Usagef("scheduler: --parallel %d: want at least 1", o.parallel)
	}
	if o.stepTimeout <= 0 || o.stuck <= 0 {
		return nil, service.Usagef("scheduler: --stuck-after %s, --step-timeout %s: want positive durations", o.stuck, o.stepTimeout)
	}
	if o.stuck <= o.stepTimeout {
		return nil, service.Usagef("scheduler: --stuck-after %s is at or below --step-timeout %s: a step still running would be published again beside itself; set --stuck-after above the workers' --step-timeout", o.stuck, o.stepTimeout)
	}
	if o.retention < 0 {
		return nil, service.Usagef("scheduler: --blob-retention %s: want 0 (keep) or a positive duration", o.retention)
	}
	if o.archive && o.runRetention == 0 {
		return nil, service.Usagef("scheduler: --archive with --retention 0: nothing is purged, so nothing would be archived")
	}
	if !(o.purgeShare > 0 && o.purgeShare <= 1) {
		return nil, service.Usagef("scheduler: --purge-share %g: want a share of the time above 0 and at most 1", o.purgeShare)
	}
	if o.purgeRate < 1 {
		return nil, service.Usagef("scheduler: --purge-rate %d: want at least 1 run a second", o.purgeRate)
	}
	return o, nil
}

// runner runs the scheduler, and a new one after each lost connection.
type runner struct {
	o       *options
	m       *metrics.Metrics
	log     zerolog.Logger
	current atomic.Pointer[scheduler.Scheduler] // the counters follow a restarted scheduler
	fleet   *metrics.Fleet                      // with --metrics; kept across restarts
}

// stats are the counters of the scheduler running now.
func (r *runner) stats() scheduler.Stats {
	if s := r.current.Load(); s != nil {
		return s.Stats()
	}
	return scheduler.Stats{}
}

// run connects and sweeps until ctx ends or the connection fails.
func (r *runner) run(ctx context.Context) error {
	s, err := r.o.conn.Open(ctx, "durable-scheduler", r.log)
	if err != nil {
		return err
	}
	s.Ready(r.m)
	defer s.Close()
	r.o.conn.WarnFewReplicas(ctx, s, r.log)
	sch, err := r.newScheduler(ctx, s)
	if err != nil {
		return err
	}
	if r.o.metricsAddr == "" {
		return sch.Run(ctx)
	}
	r.current.Store(sch)
	if r.fleet == nil {
		r.fleet, err = r.m.NewFleet(metrics.FleetConfig{Store: s.Store, JetStream: s.JetStream, Interval: r.o.fleetEvery,
			StuckMin: r.o.stuckMin, StuckDefault: r.o.stuck, PastTTLGrace: r.o.ttlGrace, Logger: &r.log})
		if err != nil {
			return service.UsageError{Msg: err.Error()}
		}
	}
	r.fleet.Use(s.Store, s.JetStream)
	fctx, stopFleet := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = r.fleet.Run(fctx) }()
	defer func() { stopFleet(); wg.Wait() }()
	return sch.Run(ctx)
}

func (r *runner) newScheduler(ctx context.Context, s *service.Session) (*scheduler.Scheduler, error) {
	cfg := scheduler.Config{Client: client.New(s.JetStream, s.Store), Interval: r.o.interval, StuckAfter: r.o.stuck, StepTimeout: r.o.stepTimeout, Lease: r.o.lease, Parallel: r.o.parallel, Logger: &r.log,
		Retention: time.Duration(r.o.runRetention), TombstoneRetention: time.Duration(r.o.tombstones), PurgeRate: r.o.purgeRate, PurgeShare: r.o.purgeShare}
	if r.o.retention > 0 {
		blobs, err := r.o.conn.OpenBlobs(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("--blob-retention: %w", err)
		}
		cfg.Blobs, cfg.BlobRetention = blobs, r.o.retention
	}
	if r.o.archive {
		archive, err := r.o.conn.OpenArchive(ctx, s, time.Duration(r.o.archiveTTL))
		if err != nil {
			return nil, fmt.Errorf("--archive: %w", err)
		}
		cfg.Archive = archive
	}
	schedules, err := OpenSchedules(ctx, &r.o.conn, s)
	if err != nil {
		return nil, err
	}
	cfg.Schedules = schedules
	sch, err := scheduler.New(cfg)
	if err != nil {
		return nil, service.UsageError{Msg: err.Error()}
	}
	return sch, nil
}

// OpenSchedules opens the schedules (pkg/schedule's KV bucket), creating
// the bucket with --replicas when it is missing. It lives here, not in
// pkg/service, so that a worker binary does not link the cron parser and
// the zone data.
func OpenSchedules(ctx context.Context, c *service.Conn, s *service.Session) (*schedule.Store, error) {
	st, err := schedule.NewStore(ctx, s.JetStream, schedule.StoreOptions{Replicas: c.Replicas})
	if err != nil {
		return nil, c.ReplicasError(fmt.Errorf("open the schedules: %w", err))
	}
	return st, nil
}
