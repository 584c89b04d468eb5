// Command approver serves the approval API and inbox page and consumes
// signed approval events:
//
//	approver --nats URL [--redis URL] [--http 127.0.0.1:8081] --tokens FILE [--event-secrets FILE] [--four-eyes]
//
// Tokens come from `durable token create --file FILE --id WHO --groups G`.
// SIGTERM or SIGINT stops it gracefully.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "approver: %v\n", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("approver", flag.ContinueOnError)
	natsURL := fs.String("nats", envOr("DURABLE_NATS_URL", nats.DefaultURL), "NATS server URL (env DURABLE_NATS_URL)")
	redisURL := fs.String("redis", os.Getenv("DURABLE_REDIS_URL"), "Redis URL of the checkpoint store (env DURABLE_REDIS_URL); empty uses JetStream KV")
	bucket := fs.String("kv-bucket", envOr("DURABLE_KV_BUCKET", "durable"), "JetStream KV bucket of the checkpoint store when no Redis URL is given")
	addr := fs.String("http", "127.0.0.1:8081", "address of the API and inbox page")
	tokenFile := fs.String("tokens", "", "token file written by `durable token create` (required)")
	secretsFile := fs.String("event-secrets", "", `JSON file {"<system>": {"secret": "...", "groups": ["..."]}} of systems that may decide through signed events on durable.approvals.<system>`)
	fourEyes := fs.Bool("four-eyes", false, "refuse a decision by the identity that started the run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	if *tokenFile == "" {
		return usageError{errors.New("--tokens FILE is required (create one with `durable token create --file FILE --id WHO --groups GROUP`)")}
	}
	log := newLogger()
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

	nc, js, store, closeAll, err := connect(ctx, *natsURL, *redisURL, *bucket, log)
	if err != nil {
		return err
	}
	defer closeAll()
	srv, err := approver.New(approver.Config{
		Client: client.New(js, store), Store: store, Tokens: set, FourEyes: *fourEyes,
		Logger: &log, EventSecrets: systems, NATS: nc,
	})
	if err != nil {
		return usageError{err}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	log.Info().Str("http", ln.Addr().String()).Int("tokens", set.Len()).Int("event_systems", len(systems)).Bool("four_eyes", *fourEyes).Msg("approver serving")
	err = srv.Serve(ctx, ln)
	log.Info().Msg("approver stopped")
	return err
}

// connect opens NATS and the checkpoint store as the durable CLI does
// (internal/cli keeps its connection code unexported; this is a copy).
func connect(ctx context.Context, natsURL, redisURL, bucket string, log zerolog.Logger) (*nats.Conn, jetstream.JetStream, checkpoint.Store, func(), error) {
	nc, err := nats.Connect(natsURL,
		nats.Name("durable-approver"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected") }),
	)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("connect to NATS at %s: %w", redact(natsURL), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !nc.IsConnected() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			nc.Close()
			return nil, nil, nil, nil, fmt.Errorf("connect to NATS at %s: not connected (is nats-server -js running? `durable dev` starts one)", redact(natsURL))
		}
		time.Sleep(50 * time.Millisecond)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, nil, err
	}
	if redisURL != "" {
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			nc.Close()
			return nil, nil, nil, nil, usageError{fmt.Errorf("redis URL %s: %w", redact(redisURL), err)}
		}
		rdb := redis.NewClient(opt)
		closeAll := func() { _ = rdb.Close(); nc.Close() }
		if err := rdb.Ping(ctx).Err(); err != nil {
			closeAll()
			return nil, nil, nil, nil, fmt.Errorf("connect to Redis at %s: %w", redact(redisURL), err)
		}
		return nc, js, redisstore.New(rdb, redisstore.Options{}), closeAll, nil
	}
	st, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		nc.Close()
		return nil, nil, nil, nil, fmt.Errorf("open JetStream KV store: %w", err)
	}
	return nc, js, st, nc.Close, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// redact hides a password in a URL.
func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}

// newLogger logs JSON at DURABLE_LOG_LEVEL (default info; an empty or
// unknown level never silences logging).
func newLogger() zerolog.Logger {
	level := zerolog.InfoLevel
	if v := os.Getenv("DURABLE_LOG_LEVEL"); v != "" {
		if l, err := zerolog.ParseLevel(v); err == nil && l != zerolog.NoLevel {
			level = l
		}
	}
	return zerolog.New(os.Stderr).Level(level).With().Timestamp().Str("component", "approver").Logger()
}
