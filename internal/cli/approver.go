package cli

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/metrics"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/client"
)

// RunApprover is the approver command: the approval API, the inbox page and
// signed external approval events, until ctx ends.
func RunApprover(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("approver", stderr)
	var c conn
	c.register(fs)
	addr := fs.String("http", "127.0.0.1:8081", "address of the API and inbox page")
	tokenFile := fs.String("tokens", "", "token file written by `durable token create` (required)")
	secretsFile := fs.String("event-secrets", "", `JSON file {"<system>": {"secret": "...", "groups": ["..."]}} of systems that may decide through signed events on durable.approvals.<system>`)
	fourEyes := fs.Bool("four-eyes", false, "refuse a decision by the identity that started the run")
	metricsAddr := fs.String("metrics", "", metricsUsage+"; /metrics is also served on --http")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("approver: unexpected argument %q", pos[0])
	}
	if *tokenFile == "" {
		return usagef("approver: --tokens FILE is required (create one with `durable token create --file FILE --id WHO --groups GROUP`)")
	}
	log := newLogger(stderr, "approver")
	useRedisLogger(log)
	set, err := tokens.Load(*tokenFile)
	if err != nil {
		return err
	}
	if set.Len() == 0 {
		return fmt.Errorf("token file %s holds no tokens: add one with `durable token create --file %s --id WHO --groups GROUP`", *tokenFile, *tokenFile)
	}
	var systems map[string]approver.EventSystem
	if *secretsFile != "" {
		if systems, err = approver.LoadEventSecrets(*secretsFile); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	defer ln.Close()
	m := metrics.Default()
	waitReady(m)
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return usageError{err.Error()}
	}
	defer waitMetrics()
	return keepTrying(ctx, log, "approver start", func() error {
		s, err := c.open(ctx, "durable-approver", log)
		if err != nil {
			return err
		}
		s.ready(m)
		defer s.Close()
		c.warnFewReplicas(ctx, s, log)
		srv, err := approver.New(approver.Config{
			Client: client.New(s.js, s.store), Store: s.store, Tokens: set, FourEyes: *fourEyes,
			Logger: &log, EventSecrets: systems, NATS: s.nc, Metrics: m.Handler(),
		})
		if err != nil {
			return usageError{err.Error()}
		}
		log.Info().Str("http", ln.Addr().String()).Int("tokens", set.Len()).Int("event_systems", len(systems)).Bool("four_eyes", *fourEyes).Msg("approver serving")
		if err := srv.Serve(ctx, ln); err != nil {
			// Serve closed the listener: starting over can't help.
			return fatalError{err}
		}
		log.Info().Msg("approver stopped")
		return nil
	})
}
