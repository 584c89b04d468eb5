// Package devenv runs the embedded parts of `durable dev` and `durable
// demo`: a JetStream server on loopback with file storage and the demo
// payments API, both keeping their data in one directory.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/durable-run/durable/internal/demo/claims"
	"github.com/durable-run/durable/internal/demo/payments"
)

// Config of the embedded environment.
type Config struct {
	// Dir holds the JetStream store and the payments records. Required.
	Dir string
	// NATSPort on 127.0.0.1; -1 picks a free one. Default 4222 when 0.
	NATSPort int
	// HTTPAddr serves the demo payments API under /demo/payments. Default
	// 127.0.0.1:8080; "127.0.0.1:0" picks a free port.
	HTTPAddr string
	// SyncAlways makes JetStream fsync every write (strict durability).
	SyncAlways bool
}

// Env is a running embedded environment.
type Env struct {
	NATS     *server.Server
	NATSURL  string
	HTTPURL  string
	Payments *payments.Server
	Claims   *claims.Server
	Mux      *http.ServeMux
	http     *http.Server
	lis      net.Listener
	done     chan error
}

// PaymentsURL is the base URL of the demo payments API.
func (e *Env) PaymentsURL() string { return e.HTTPURL + "/demo/payments" }

// ClaimsURL is the base URL of the demo claims system.
func (e *Env) ClaimsURL() string { return e.HTTPURL + "/demo/claims" }

// Start brings up NATS and the HTTP server. Close stops both.
func Start(cfg Config) (*Env, error) {
	if cfg.Dir == "" {
		return nil, errors.New("devenv: Dir is required")
	}
	if cfg.NATSPort == 0 {
		cfg.NATSPort = 4222
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:8080"
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	opts := &server.Options{
		ServerName: "durable-dev",
		Host:       "127.0.0.1",
		Port:       cfg.NATSPort,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.Dir, "jetstream"),
		NoLog:      true,
		NoSigs:     true,
	}
	if cfg.SyncAlways {
		opts.SyncAlways = true
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats-server did not start on 127.0.0.1:%d (port in use? pass --nats-port)", cfg.NATSPort)
	}
	pay, err := payments.Open(filepath.Join(cfg.Dir, "payments.jsonl"))
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	cls, err := claims.Open(filepath.Join(cfg.Dir, "claims.json"))
	if err != nil {
		_ = pay.Close()
		ns.Shutdown()
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		_ = pay.Close()
		ns.Shutdown()
		return nil, fmt.Errorf("listen %s: %w (pass --http to use another address)", cfg.HTTPAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/demo/payments/", http.StripPrefix("/demo/payments", pay.Handler()))
	mux.Handle("/demo/payments", http.StripPrefix("/demo/payments", pay.Handler()))
	mux.Handle("/demo/claims/", http.StripPrefix("/demo/claims", cls.Handler()))
	e := &Env{
		NATS: ns, NATSURL: ns.ClientURL(), HTTPURL: "http://" + lis.Addr().String(),
		Payments: pay, Claims: cls, Mux: mux, lis: lis, done: make(chan error, 1),
		http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { e.done <- e.http.Serve(lis) }()
	return e, nil
}

// Close stops the HTTP server, the payments records and NATS.
func (e *Env) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.http.Shutdown(ctx)
	if serr := <-e.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	err = errors.Join(err, e.Payments.Close())
	e.NATS.Shutdown()
	e.NATS.WaitForShutdown()
	return err
}
