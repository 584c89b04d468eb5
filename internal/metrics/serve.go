package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// Mux serves /metrics from m, and /healthz and /readyz (200 while the
// process serves).
func Mux(m *Metrics) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	ok := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	return mux
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
