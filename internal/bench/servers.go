package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/durable-run/durable/internal/proc"
)

// Servers are the servers a bench runs on, all on 127.0.0.1: an embedded
// nats-server with JetStream file storage (default sync interval) and,
// when asked for, a redis-server process with appendonly yes and
// appendfsync everysec. Close stops them. They are started by
// internal/proc, as the tests' servers are.
type Servers struct {
	NATS    *server.Server
	NATSURL string
	// RedisURL is empty when no redis-server was started.
	RedisURL     string
	RedisVersion string
	nats         *proc.NATS
	redis        *proc.Redis
	strict       bool
}

// ErrNoRedis: redis-server is not installed.
var ErrNoRedis = errors.New("redis-server not found on PATH: install it (Debian: apt-get install redis-server), or run only the KV store without the floor (--store kv --skip-floor)")

// StartServers starts nats-server in dir/nats and, when withRedis,
// redis-server in dir/redis. strict makes both sync every write to disk
// (JetStream sync_interval always, Redis appendfsync always).
func StartServers(ctx context.Context, dir string, withRedis, strict bool) (*Servers, error) {
	s := &Servers{strict: strict}
	cfg := proc.NATSConfig{Name: "durable-bench", Dir: filepath.Join(dir, "nats"), Embedded: true}
	if strict {
		cfg.Options = func(o *server.Options) { o.SyncAlways = true }
	}
	n, err := proc.StartNATS(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.nats, s.NATS, s.NATSURL = n, n.Server, n.URL
	if withRedis {
		if err := s.startRedis(ctx, filepath.Join(dir, "redis")); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Servers) startRedis(ctx context.Context, dir string) error {
	aof := "everysec"
	if s.strict {
		aof = "always"
	}
	args := []string{"--protected-mode", "yes"}
	major, _, _ := strings.Cut(proc.RedisVersion(ctx), ".")
	if n, err := strconv.Atoi(major); err == nil && n >= 7 {
		// DEBUG HTSTATS from 127.0.0.1: the history phase waits for a
		// rehash of the keys (Bench.redisRehashed). Redis 6 has no such
		// option, and allows DEBUG.
		args = append(args, "--enable-debug-command", "local")
	}
	r, err := proc.StartRedis(ctx, proc.RedisConfig{Dir: dir, AOF: aof, Args: args})
	if errors.Is(err, exec.ErrNotFound) {
		return ErrNoRedis
	}
	if err != nil {
		return fmt.Errorf("redis-server did not come up on 127.0.0.1: %w", err)
	}
	s.redis, s.RedisURL = r, r.URL
	s.RedisVersion = proc.RedisVersion(ctx)
	return nil
}

// Close stops redis-server (SIGTERM: it flushes its AOF) and nats-server.
func (s *Servers) Close() {
	if s.redis != nil {
		_ = s.redis.Stop(5 * time.Second)
		s.redis = nil
	}
	if s.nats != nil {
		s.nats.Stop()
		s.nats, s.NATS = nil, nil
	}
}

// RedisPID is redis-server's process id, 0 when none runs.
func (s *Servers) RedisPID() int {
	if s.redis == nil {
		return 0
	}
	return s.redis.Pid()
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
