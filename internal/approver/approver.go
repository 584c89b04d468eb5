package approver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
)

// Config configures a Server. Client and Tokens are required.
type Config struct {
	// Client records decisions (client.Decide is the one audited decision
	// path) and resumes runs. Required.
	Client *client.Client
	// Store lists and reads parked runs. Default: Client.Store().
	Store checkpoint.Store
	// Tokens are the bearer tokens of the HTTP API. Required.
	Tokens *tokens.Set
	// FourEyes refuses a decision by the identity that started the run.
	FourEyes bool
	// MaxBody is the largest request body accepted, in bytes. Default 64 KiB.
	MaxBody int64
	// MaxList is the most approvals GET /api/approvals returns. Default 500.
	MaxList int
	// Logger logs every decision and refusal. Default: zerolog's global
	// logger (github.com/rs/zerolog/log.Logger); zerolog.Nop() silences it.
	Logger *zerolog.Logger
	// EventSecrets are the external systems allowed to decide through
	// signed NATS events, by system name. Empty: no events are consumed.
	EventSecrets map[string]EventSystem
	// NATS carries the approval events. Required when EventSecrets is set.
	NATS *nats.Conn
	// Metrics, when set, is served at GET /metrics (Prometheus; no token:
	// it carries no run ids or payloads).
	Metrics http.Handler
	// SignalMetrics, when set, counts the signals the server takes
	// (pkg/metrics.Metrics implements it).
	SignalMetrics interface {
		SignalReceived(channel, outcome string)
	}
	// TraceURL links a run's page to its trace: a URL with {trace_id} in
	// it, e.g. http://jaeger:16686/trace/{trace_id}. Empty: no link.
	TraceURL string
	// Schedules, when set, are served to operators at /api/schedules and
	// on the page /schedules (the approver command opens the bucket
	// durable_schedules). Nil: those answer 404.
	Schedules *schedule.Store
	// EventWindow is how old an event's ts may be. Default 5 minutes; an
	// event from more than a minute in the future is refused too.
	EventWindow time.Duration
}

// Defaults of Config.
const (
	DefaultMaxBody     = 64 << 10
	DefaultMaxList     = 500
	DefaultEventWindow = 5 * time.Minute
)

// Server is the approver: the HTTP API, the inbox page and the consumer
// of external approval events. It holds no state that matters across a
// restart (only recently seen event ids), so several can run side by side.
type Server struct {
	cfg    Config
	store  checkpoint.Store
	log    zerolog.Logger
	events *eventState
	// runsPage is runs.html with the trace URL in its body's data.
	runsPage []byte
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("approver: Config.Client is required")
	}
	if cfg.Tokens == nil {
		return nil, errors.New("approver: Config.Tokens is required (load a token file with tokens.Load)")
	}
	if cfg.MaxBody < 0 || cfg.MaxList < 0 || cfg.EventWindow < 0 {
		return nil, errors.New("approver: MaxBody, MaxList and EventWindow must not be negative")
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxList == 0 {
		cfg.MaxList = DefaultMaxList
	}
	if cfg.EventWindow == 0 {
		cfg.EventWindow = DefaultEventWindow
	}
	if len(cfg.EventSecrets) > 0 && cfg.NATS == nil {
		return nil, errors.New("approver: Config.NATS is required to consume approval events")
	}
	for name, sys := range cfg.EventSecrets {
		if err := sys.validate(name); err != nil {
			return nil, fmt.Errorf("approver: %w", err)
		}
	}
	if cfg.TraceURL != "" {
		u, err := url.Parse(strings.Replace(cfg.TraceURL, "{trace_id}", "0", 1))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.Contains(cfg.TraceURL, "{trace_id}") {
			return nil, fmt.Errorf("approver: trace URL %q: want an http(s) URL with {trace_id} in it, e.g. http://jaeger:16686/trace/{trace_id}", cfg.TraceURL)
		}
	}
	s := &Server{cfg: cfg, store: cfg.Store, log: log.Logger}
	s.runsPage = withTraceURL(runsHTML, cfg.TraceURL)
	if s.store == nil {
		s.store = cfg.Client.Store()
	}
	if cfg.Logger != nil {
		s.log = *cfg.Logger
	}
	s.events = newEventState(cfg.EventWindow)
	return s, nil
}

// Run consumes external approval events until ctx ends, then drains the
// subscription. Without EventSecrets it only waits for ctx: a replica
// that knows no system must not take events from the queue group.
func (s *Server) Run(ctx context.Context) error {
	if len(s.cfg.EventSecrets) == 0 {
		<-ctx.Done()
		return nil
	}
	return s.consumeEvents(ctx)
}

// Serve serves the HTTP API and the inbox page on ln and consumes events
// (Run) until ctx ends, then shuts the HTTP server down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpErr := make(chan error, 1)
	go func() {
		err := hs.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		cancel() // a dead listener stops the events too
		httpErr <- err
	}()
	runErr := s.Run(ctx)
	shutCtx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	if err := hs.Shutdown(shutCtx); err != nil {
		_ = hs.Close()
	}
	if err := <-httpErr; err != nil {
		return fmt.Errorf("approver http: %w", err)
	}
	return runErr
}
