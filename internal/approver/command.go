package approver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/schedule"
	"github.com/durable-run/durable/pkg/service"
)

// TokenReloads logs what tokens.Set.Watch reports of the token file at
// path: each reload, and each version of the file it refused (the tokens
// in use stay as they were).
func TokenReloads(log zerolog.Logger, path string) func(n int, err error) {
	return func(n int, err error) {
		if err != nil {
			log.Error().Err(err).Str("file", path).Msg("token file not reloaded; the tokens in use are kept")
			return
		}
		log.Info().Str("file", path).Int("tokens", n).Msg("token file reloaded")
	}
}

// RunCommand is the approver command (cmd/approver, `durable approver`):
// the approval API, the inbox page and signed external approval events,
// until ctx ends.
func RunCommand(ctx context.Context, args []string, stderr io.Writer) error {
	fs := service.NewFlagSet("approver", stderr)
	var c service.Conn
	c.Register(fs)
	addr := fs.String("http", "127.0.0.1:8081", "address of the API and inbox page")
	tokenFile := fs.String("tokens", "", "token file written by `durable token create` (required)")
	secretsFile := fs.String("event-secrets", "", `JSON file {"<system>": {"secret": "...", "groups": ["..."]}} of systems that may decide through signed events on durable.approvals.<system>`)
	fourEyes := fs.Bool("four-eyes", false, "refuse a decision by the identity that started the run")
	metricsAddr := fs.String("metrics", "", service.MetricsUsage+"; /metrics is also served on --http")
	traceURL := fs.String("trace-url", os.Getenv("DURABLE_TRACE_URL"), "link a run's page to its trace: a URL with {trace_id}, e.g. http://jaeger:16686/trace/{trace_id} (env DURABLE_TRACE_URL)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("approver: unexpected argument %q", pos[0])
	}
	if *tokenFile == "" {
		return service.Usagef("approver: --tokens FILE is required (create one with `durable token create --file FILE --id WHO --groups GROUP`)")
	}
	log := service.NewLogger(stderr, "approver")
	service.UseRedisLogger(log)
	shutdownTracing, err := service.StartTracing(ctx, "durable-approver")
	if err != nil {
		return err
	}
	defer service.StopTracing(shutdownTracing)
	set, err := tokens.Load(*tokenFile)
	if err != nil {
		return err
	}
	if set.Len() == 0 {
		return fmt.Errorf("token file %s holds no tokens: add one with `durable token create --file %s --id WHO --groups GROUP`", *tokenFile, *tokenFile)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() { set.Watch(watchCtx, *tokenFile, tokens.WatchInterval, TokenReloads(log, *tokenFile)) })
	defer func() { stopWatch(); watching.Wait() }()
	var systems map[string]EventSystem
	if *secretsFile != "" {
		if systems, err = LoadEventSecrets(*secretsFile); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	defer ln.Close()
	m := metrics.Default()
	service.WaitReady(m)
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	defer waitMetrics()
	cfg := Config{Tokens: set, FourEyes: *fourEyes, Logger: &log, EventSecrets: systems, Metrics: m.Handler(), SignalMetrics: m, TraceURL: *traceURL}
	return service.KeepTrying(ctx, log, "approver start", func() error { return serve(ctx, &c, cfg, ln, m) })
}

// serve connects, opens the schedules and serves cfg's approver on ln
// until ctx ends: one attempt of RunCommand's, which tries again when
// connecting fails.
func serve(ctx context.Context, c *service.Conn, cfg Config, ln net.Listener, m *metrics.Metrics) error {
	log := *cfg.Logger
	s, err := c.Open(ctx, "durable-approver", log)
	if err != nil {
		return err
	}
	s.Ready(m)
	defer s.Close()
	c.WarnFewReplicas(ctx, s, log)
	if cfg.Schedules, err = OpenSchedules(ctx, c, s); err != nil {
		return err
	}
	cfg.Client, cfg.Store, cfg.NATS = client.New(s.JetStream, s.Store), s.Store, s.NATS
	srv, err := New(cfg)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	log.Info().Str("http", ln.Addr().String()).Int("tokens", cfg.Tokens.Len()).Int("event_systems", len(cfg.EventSecrets)).Bool("four_eyes", cfg.FourEyes).Msg("approver serving")
	if err := srv.Serve(ctx, ln); err != nil {
		// Serve closed the listener: starting over can't help.
		return service.FatalError{Err: err}
	}
	log.Info().Msg("approver stopped")
	return nil
}

// OpenSchedules opens the schedules the API serves (pkg/schedule's KV
// bucket), creating the bucket with --replicas when it is missing, as a
// scheduler does (pkg/schedulercmd.OpenSchedules, which the approver does
// not call: it would link the scheduler).
func OpenSchedules(ctx context.Context, c *service.Conn, s *service.Session) (*schedule.Store, error) {
	st, err := schedule.NewStore(ctx, s.JetStream, schedule.StoreOptions{Replicas: c.Replicas})
	if err != nil {
		return nil, c.ReplicasError(fmt.Errorf("open the schedules: %w", err))
	}
	return st, nil
}
