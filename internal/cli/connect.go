package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
)

// conn holds the connection flags every command shares.
type conn struct {
	natsURL  string
	redisURL string
	bucket   string
}

func (c *conn) register(fs *flag.FlagSet) {
	fs.StringVar(&c.natsURL, "nats", envOr("DURABLE_NATS_URL", nats.DefaultURL), "NATS server URL (env DURABLE_NATS_URL)")
	fs.StringVar(&c.redisURL, "redis", os.Getenv("DURABLE_REDIS_URL"), "Redis URL for the checkpoint store (env DURABLE_REDIS_URL); empty uses JetStream KV")
	fs.StringVar(&c.bucket, "kv-bucket", envOr("DURABLE_KV_BUCKET", "durable"), "JetStream KV bucket of the checkpoint store when no Redis URL is given")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// session is an open connection to NATS and the store.
type session struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	store checkpoint.Store
	rdb   redis.UniversalClient
}

func (s *session) Close() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.nc != nil {
		s.nc.Close()
	}
}

// open connects to NATS and the store, retrying NATS briefly so that a
// fleet can start in any order.
func (c *conn) open(ctx context.Context, name string, log zerolog.Logger) (*session, error) {
	nc, err := nats.Connect(c.natsURL,
		nats.Name(name),
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
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(c.natsURL), err)
	}
	if err := waitConnected(ctx, nc, 10*time.Second); err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect to NATS at %s: %w (is nats-server -js running? `durable dev` starts one)", redactURL(c.natsURL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s := &session{nc: nc, js: js}
	if c.redisURL != "" {
		opt, err := redis.ParseURL(c.redisURL)
		if err != nil {
			s.Close()
			return nil, usageError{fmt.Sprintf("redis URL %s: %v", redactURL(c.redisURL), err)}
		}
		s.rdb = redis.NewClient(opt)
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			s.Close()
			return nil, fmt.Errorf("connect to Redis at %s: %w", redactURL(c.redisURL), err)
		}
		s.store = redisstore.New(s.rdb, redisstore.Options{})
		return s, nil
	}
	st, err := kvstore.New(ctx, js, kvstore.Options{Bucket: c.bucket})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open JetStream KV store: %w", err)
	}
	s.store = st
	return s, nil
}

func waitConnected(ctx context.Context, nc *nats.Conn, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !nc.IsConnected() {
		if time.Now().After(deadline) {
			return errors.New("not connected after " + timeout.String())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// redactURL hides a password in a URL for logs and errors.
func redactURL(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}

// newLogger returns a JSON logger at DURABLE_LOG_LEVEL (default info; an
// empty or unknown level never silences logging).
func newLogger(w io.Writer, component string) zerolog.Logger {
	level := zerolog.InfoLevel
	if v := os.Getenv("DURABLE_LOG_LEVEL"); v != "" {
		if l, err := zerolog.ParseLevel(v); err == nil && l != zerolog.NoLevel {
			level = l
		}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("component", component).Logger()
}

// parseArgs parses flags that may come before or after positional
// arguments (`durable runs show RUN --json`) and returns the positionals.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}
