package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Mux serves /metrics from m; /healthz (liveness: 200 while the process
// serves) and /readyz (readiness: 200 when every check added with
// Ready passes, else 503 naming the failures).
func Mux(m *Metrics) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		failed := m.readiness.check(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(struct {
			OK     bool              `json:"ok"`
			Failed map[string]string `json:"failed,omitempty"`
		}{len(failed) == 0, failed})
	})
	return mux
}

// readiness holds the checks /readyz runs.
type readiness struct {
	mu     sync.Mutex
	checks map[string]func(context.Context) error
}

// Ready sets the readiness checks, replacing every earlier one: /readyz
// answers 503 while one of them fails. A command sets what its current
// connections need, so a check of a connection it no longer has (closed
// by a reconnect, or a store it does not use) never lingers. A check
// should be cheap (a ping, a connection's state): it runs on every probe,
// with a 2 s timeout.
func (m *Metrics) Ready(checks map[string]func(context.Context) error) {
	m.readiness.mu.Lock()
	defer m.readiness.mu.Unlock()
	m.readiness.checks = maps.Clone(checks)
}

// check runs the checks at once; the failed ones by name.
func (r *readiness) check(ctx context.Context) map[string]string {
	r.mu.Lock()
	checks := make(map[string]func(context.Context) error, len(r.checks))
	maps.Copy(checks, r.checks)
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	failed := map[string]string{}
	for name, fn := range checks {
		wg.Go(func() {
			if err := fn(ctx); err != nil {
				mu.Lock()
				failed[name] = err.Error()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// Listen opens addr for Serve, so that a bad address fails at start.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w (set another --metrics address, or --metrics \"\" to turn it off)", addr, err)
	}
	return ln, nil
}

// Serve serves Mux(m) on ln until ctx ends, then closes it.
func Serve(ctx context.Context, ln net.Listener, m *Metrics, log zerolog.Logger) error {
	srv := &http.Server{Handler: Mux(m), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info().Str("metrics", ln.Addr().String()).Msg("serving /metrics, /healthz, /readyz")
	err := srv.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Start serves m on addr in the background until ctx ends; an empty addr
// serves nothing. The returned wait blocks until the server stopped.
func Start(ctx context.Context, addr string, m *Metrics, log zerolog.Logger) (wait func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := Listen(addr)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := Serve(ctx, ln, m, log); err != nil {
			log.Error().Err(err).Msg("metrics server stopped")
		}
	}()
	return func() { <-done }, nil
}
