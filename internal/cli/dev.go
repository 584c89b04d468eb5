package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/devenv"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/worker"
)

func cmdDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable dev", stderr)
	data := fs.String("data", ".durable", "data directory (JetStream store, payments records)")
	natsPort := fs.Int("nats-port", 4222, "NATS port on 127.0.0.1 (other workers and the nats CLI can join)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "address of the demo payments API (/demo/payments)")
	workers := fs.Int("workers", 2, "in-process workers")
	concurrency := fs.Int("concurrency", 16, "steps each worker runs at once")
	ackWait := fs.Duration("ack-wait", 5*time.Second, "redelivery timeout of an unacknowledged step")
	// The env default is read after parsing so that -h never prints it.
	redisURL := fs.String("redis", "", "Redis URL for the checkpoint store (env DURABLE_REDIS_URL); empty uses JetStream KV")
	metricsAddr := fs.String("metrics", "", service.MetricsUsage+"; /metrics is also served on --http")
	tokenFile := fs.String("tokens", "", "approver token file (default: DATA/tokens.json, created with a dev token)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("dev: unexpected argument %q", pos[0])
	}
	if *redisURL == "" {
		*redisURL = os.Getenv("DURABLE_REDIS_URL")
	}
	if *workers < 0 || *workers > 64 {
		return service.Usagef("dev: --workers must be between 0 and 64")
	}
	dir, err := filepath.Abs(*data)
	if err != nil {
		return err
	}
	env, err := devenv.Start(devenv.Config{Dir: dir, NATSPort: *natsPort, HTTPAddr: *httpAddr})
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
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	defer waitMetrics()
	c := service.Conn{NATSURL: env.NATSURL, RedisURL: *redisURL, KVBucket: "durable"}
	var wg sync.WaitGroup
	errs := make(chan error, *workers+2)
	for i := range *workers {
		wlog := service.NewLogger(stderr, "worker").With().Int("worker", i+1).Logger()
		s, err := c.Open(ctx, fmt.Sprintf("durable-dev-worker-%d", i+1), wlog)
		if err != nil {
			return err
		}
		defer s.Close()
		blobs, err := objstore.New(ctx, s.JetStream, objstore.Options{})
		if err != nil {
			return fmt.Errorf("open the blob store: %w", err)
		}
		w, err := worker.New(worker.Config{JetStream: s.JetStream, Store: s.Store, Registry: ReferenceWorkflows(),
			Concurrency: *concurrency, AckWait: *ackWait, Logger: &wlog, Metrics: m, Blobs: blobs})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	{
		slog := service.NewLogger(stderr, "scheduler")
		s, err := c.Open(ctx, "durable-dev-scheduler", slog)
		if err != nil {
			return err
		}
		defer s.Close()
		sch, err := scheduler.New(scheduler.Config{Client: client.New(s.JetStream, s.Store), Logger: &slog})
		if err != nil {
			return err
		}
		m.RegisterScheduler(sch.Stats)
		fleet, err := m.NewFleet(metrics.FleetConfig{Store: s.Store, JetStream: s.JetStream, Logger: &slog})
		if err != nil {
			return err
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := sch.Run(ctx); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			_ = fleet.Run(ctx)
		}()
	}
	tokPath, tokNote, err := devTokens(dir, *tokenFile)
	if err != nil {
		return err
	}
	{
		alog := service.NewLogger(stderr, "approver")
		s, err := c.Open(ctx, "durable-dev-approver", alog)
		if err != nil {
			return err
		}
		defer s.Close()
		set, err := tokens.Load(tokPath)
		if err != nil {
			return err
		}
		srv, err := approver.New(approver.Config{Client: client.New(s.JetStream, s.Store), Store: s.Store, Tokens: set, Logger: &alog, NATS: s.NATS, Metrics: m.Handler()})
		if err != nil {
			return err
		}
		// The inbox page and the API share the dev HTTP address with the
		// demo APIs (their /demo/ routes are more specific).
		env.Mux.Handle("/", srv.Handler())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	store := "JetStream KV (bucket durable)"
	if *redisURL != "" {
		store = "Redis " + service.RedactURL(*redisURL)
	}
	fmt.Fprintf(stdout, `durable dev is up
  NATS            %s   (nats CLI: nats --server %s stream ls)
  store           %s
  payments API    %s
  claims system   %s   (PUT {"amount": N} to edit a claim while it waits)
  data            %s
  workers         %d in-process
  scheduler       in-process (expired waits, timers, stuck runs)
  approver        %s/  (inbox page and /api/approvals; %s)
Try:
  durable start claim --id claim-0001
  durable runs list
  durable approve claim-0001 --by you
Ctrl-C stops.
`, env.NATSURL, env.NATSURL, store, env.PaymentsURL(), env.ClaimsURL(), dir, *workers, env.HTTPURL, tokNote)
	select {
	case <-ctx.Done():
	case err := <-errs:
		log.Error().Err(err).Msg("worker stopped")
		cancel()
	}
	wg.Wait()
	return nil
}

// devTokens returns the approver's token file for `durable dev`. Without
// --tokens it is DATA/tokens.json, created on first start with a token for
// dev-adjuster (groups adjusters and supervisors), which is also kept in
// DATA/dev-token (mode 0600) so that it can be found again after a restart.
func devTokens(dir, flagPath string) (path, note string, err error) {
	if flagPath != "" {
		return flagPath, "tokens from " + flagPath, nil
	}
	path = filepath.Join(dir, "tokens.json")
	tokPath := filepath.Join(dir, "dev-token")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		tok, err := tokens.Create(path, "dev-adjuster", []string{"adjusters", "supervisors"})
		if err != nil {
			return "", "", err
		}
		if err := os.WriteFile(tokPath, []byte(tok+"\n"), 0o600); err != nil {
			return "", "", err
		}
	}
	return path, "dev token for dev-adjuster in " + tokPath, nil
}
