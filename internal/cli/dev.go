package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/demo/devenv"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/schedulercmd"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/worker"
	"github.com/durable-run/durable/pkg/workercmd"
)

func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseDevFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(o.data)
	if err != nil {
		return err
	}
	env, err := devenv.Start(devenv.Config{Dir: dir, NATSPort: o.natsPort, HTTPAddr: o.httpAddr})
	if err != nil {
		return err
	}
	defer env.Close()
	if os.Getenv("DURABLE_PAYMENTS_URL") == "" {
		_ = os.Setenv("DURABLE_PAYMENTS_URL", env.PaymentsURL())
	}
	if os.Getenv("DURABLE_CLAIMS_URL") == "" {
		_ = os.Setenv("DURABLE_CLAIMS_URL", env.ClaimsURL())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := service.NewLogger(stderr, "dev")
	service.UseRedisLogger(log)
	m := metrics.Default()
	waitMetrics, err := metrics.Start(ctx, o.metricsAddr, m, log)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	defer waitMetrics()
	p := &devProcs{
		c: service.Conn{NATSURL: env.NATSURL, RedisURL: o.redisURL, KVBucket: "durable"},
		m: m, stderr: stderr, errs: make(chan error, o.workers+2), retention: time.Duration(o.retention), archive: o.archive,
	}
	defer p.close()
	if err := p.startWorkers(ctx, o); err != nil {
		return err
	}
	if err := p.startScheduler(ctx); err != nil {
		return err
	}
	tokPath, tokNote, err := devTokens(dir, o.tokenFile)
	if err != nil {
		return err
	}
	if err := p.startApprover(ctx, env, tokPath, o.traceURL); err != nil {
		return err
	}
	printDevBanner(stdout, env, o, dir, tokNote)
	select {
	case <-ctx.Done():
	case err := <-p.errs:
		log.Error().Err(err).Msg("worker stopped")
		cancel()
	}
	p.wg.Wait()
	return nil
}

// devOptions are the flags of `durable dev`.
type devOptions struct {
	data, httpAddr, redisURL, metricsAddr, tokenFile, traceURL string
	natsPort, workers, concurrency                             int
	ackWait                                                    time.Duration
	retention                                                  schedulercmd.Days
	archive                                                    bool
}

func parseDevFlags(args []string, stderr io.Writer) (devOptions, error) {
	var o devOptions
	fs := service.NewFlagSet("durable dev", stderr)
	fs.StringVar(&o.data, "data", ".durable", "data directory (JetStream store, payments records)")
	fs.IntVar(&o.natsPort, "nats-port", 4222, "NATS port on 127.0.0.1 (other workers and the nats CLI can join)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "address of the approver (inbox /, runs pages /runs, /dlq and /schedules, /api/approvals, /api/runs, /api/schedules) and the demo APIs (/demo/payments, /demo/claims)")
	fs.IntVar(&o.workers, "workers", 2, "in-process workers")
	fs.IntVar(&o.concurrency, "concurrency", 16, "steps each worker runs at once")
	fs.DurationVar(&o.ackWait, "ack-wait", 5*time.Second, "redelivery timeout of an unacknowledged step")
	o.retention = schedulercmd.Days(scheduler.DefaultRetention)
	fs.Var(&o.retention, "retention", "purge the runs that ended this long ago (30d, 720h; 0 keeps every run), leaving a tombstone (env DURABLE_RETENTION)")
	fs.BoolVar(&o.archive, "archive", false, "archive a run (gzipped JSON in the Object Store bucket "+client.ArchiveBucket+") before retention purges it; durable runs show reads it (env DURABLE_ARCHIVE=1)")
	// The env default is read after parsing so that -h never prints it.
	fs.StringVar(&o.redisURL, "redis", "", "Redis URL for the checkpoint store (env DURABLE_REDIS_URL); empty uses JetStream KV")
	fs.StringVar(&o.metricsAddr, "metrics", "", service.MetricsUsage+"; /metrics is also served on --http")
	fs.StringVar(&o.tokenFile, "tokens", "", "approver token file (default: DATA/tokens.json, created with a dev token; re-read when it changes)")
	fs.StringVar(&o.traceURL, "trace-url", "", "link a run's page to its trace: a URL with {trace_id}, e.g. http://127.0.0.1:16686/trace/{trace_id} (env DURABLE_TRACE_URL)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return o, err
	}
	if len(pos) > 0 {
		return o, service.Usagef("dev: unexpected argument %q", pos[0])
	}
	if o.redisURL == "" {
		o.redisURL = os.Getenv("DURABLE_REDIS_URL")
	}
	if o.traceURL == "" {
		o.traceURL = os.Getenv("DURABLE_TRACE_URL")
	}
	if v := os.Getenv("DURABLE_RETENTION"); v != "" && !flagGiven(fs, "retention") {
		if err := o.retention.Set(v); err != nil {
			return o, service.Usagef("dev: DURABLE_RETENTION %v", err)
		}
	}
	if os.Getenv("DURABLE_ARCHIVE") == "1" {
		o.archive = true
	}
	if o.workers < 0 || o.workers > 64 {
		return o, service.Usagef("dev: --workers must be between 0 and 64")
	}
	return o, nil
}

// devProcs are the services `durable dev` runs in process, each on its own
// connection. The connections stay open until dev returns, after every
// service has stopped.
type devProcs struct {
	c         service.Conn
	retention time.Duration
	archive   bool
	m         *metrics.Metrics
	stderr    io.Writer
	sessions  []*service.Session
	wg        sync.WaitGroup
	errs      chan error // the first error a service stops with ends dev
}

// open opens a connection that close closes.
func (p *devProcs) open(ctx context.Context, name string, log zerolog.Logger) (*service.Session, error) {
	s, err := p.c.Open(ctx, name, log)
	if err != nil {
		return nil, err
	}
	p.sessions = append(p.sessions, s)
	return s, nil
}

// close closes the connections, the last opened first.
func (p *devProcs) close() {
	for i := len(p.sessions) - 1; i >= 0; i-- {
		p.sessions[i].Close()
	}
}

// run runs a service until ctx ends; its error stops dev.
func (p *devProcs) run(ctx context.Context, run func(context.Context) error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := run(ctx); err != nil {
			p.errs <- err
		}
	}()
}

func (p *devProcs) startWorkers(ctx context.Context, o devOptions) error {
	for i := range o.workers {
		wlog := service.NewLogger(p.stderr, "worker").With().Int("worker", i+1).Logger()
		s, err := p.open(ctx, fmt.Sprintf("durable-dev-worker-%d", i+1), wlog)
		if err != nil {
			return err
		}
		blobs, err := objstore.New(ctx, s.JetStream, objstore.Options{})
		if err != nil {
			return fmt.Errorf("open the blob store: %w", err)
		}
		limits, err := workercmd.OpenFlow(ctx, &p.c, s)
		if err != nil {
			return err
		}
		w, err := worker.New(worker.Config{JetStream: s.JetStream, Store: s.Store, Registry: ReferenceWorkflows(),
			Concurrency: o.concurrency, AckWait: o.ackWait, Logger: &wlog, Metrics: p.m, Blobs: blobs, Flow: limits})
		if err != nil {
			return err
		}
		p.run(ctx, w.Run)
	}
	return nil
}

// startScheduler starts the scheduler and the fleet metrics beside it.
func (p *devProcs) startScheduler(ctx context.Context) error {
	slog := service.NewLogger(p.stderr, "scheduler")
	s, err := p.open(ctx, "durable-dev-scheduler", slog)
	if err != nil {
		return err
	}
	cfg := scheduler.Config{Client: client.New(s.JetStream, s.Store), Logger: &slog, Retention: p.retention}
	if cfg.Schedules, err = schedulercmd.OpenSchedules(ctx, &p.c, s); err != nil {
		return err
	}
	if p.archive {
		if cfg.Archive, err = p.c.OpenArchive(ctx, s, 0); err != nil {
			return err
		}
	}
	sch, err := scheduler.New(cfg)
	if err != nil {
		return err
	}
	schedulercmd.RegisterMetrics(p.m, sch.Stats)
	fleet, err := p.m.NewFleet(metrics.FleetConfig{Store: s.Store, JetStream: s.JetStream, Logger: &slog})
	if err != nil {
		return err
	}
	p.run(ctx, sch.Run)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = fleet.Run(ctx)
	}()
	return nil
}

func (p *devProcs) startApprover(ctx context.Context, env *devenv.Env, tokPath, traceURL string) error {
	alog := service.NewLogger(p.stderr, "approver")
	s, err := p.open(ctx, "durable-dev-approver", alog)
	if err != nil {
		return err
	}
	set, err := tokens.Load(tokPath)
	if err != nil {
		return err
	}
	p.run(ctx, func(ctx context.Context) error {
		set.Watch(ctx, tokPath, tokens.WatchInterval, approver.TokenReloads(alog, tokPath))
		return nil
	})
	schedules, err := schedulercmd.OpenSchedules(ctx, &p.c, s)
	if err != nil {
		return err
	}
	srv, err := approver.New(approver.Config{Client: client.New(s.JetStream, s.Store), Store: s.Store, Tokens: set, Logger: &alog, NATS: s.NATS,
		Metrics: p.m.Handler(), SignalMetrics: p.m, TraceURL: traceURL, Schedules: schedules})
	if err != nil {
		return err
	}
	// The inbox page and the API share the dev HTTP address with the
	// demo APIs (their /demo/ routes are more specific).
	env.Mux.Handle("/", srv.Handler())
	p.run(ctx, srv.Run)
	return nil
}

func printDevBanner(stdout io.Writer, env *devenv.Env, o devOptions, dir, tokNote string) {
	store := "JetStream KV (bucket durable)"
	if o.redisURL != "" {
		store = "Redis " + service.RedactURL(o.redisURL)
	}
	fmt.Fprintf(stdout, `durable dev is up
  NATS            %s   (nats CLI: nats --server %s stream ls)
  store           %s
  payments API    %s
  claims system   %s   (PUT {"amount": N} to edit a claim while it waits)
  data            %s
  workers         %d in-process
  scheduler       in-process (expired waits, timers, stuck runs)
  approver        %s/  (inbox; runs at /runs, dead letters at /dlq, schedules at /schedules; /api/approvals, /api/runs, /api/schedules; %s)
Try:
  durable start claim --id claim-0001
  durable runs list
  durable approve claim-0001 --by you
Ctrl-C stops.
`, env.NATSURL, env.NATSURL, store, env.PaymentsURL(), env.ClaimsURL(), dir, o.workers, env.HTTPURL, tokNote)
}

// devTokens returns the approver's token file for `durable dev`. Without
// --tokens it is DATA/tokens.json, created on first start with a token for
// dev-adjuster (groups adjusters, supervisors and operators: it decides
// approvals and reads, cancels and redrives runs), which is also kept in
// DATA/dev-token (mode 0600) so that it can be found again after a restart.
func devTokens(dir, flagPath string) (path, note string, err error) {
	if flagPath != "" {
		return flagPath, "tokens from " + flagPath, nil
	}
	path = filepath.Join(dir, "tokens.json")
	tokPath := filepath.Join(dir, "dev-token")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		tok, err := tokens.Create(path, "dev-adjuster", []string{"adjusters", "supervisors", "operators"})
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(tokPath, []byte(tok+"\n"), 0o600); err != nil {
			return "", "", err
		}
	}
	return path, "dev token for dev-adjuster in " + tokPath, nil
}

// flagGiven reports whether the command line set flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
