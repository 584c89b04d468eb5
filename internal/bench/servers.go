package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Servers are the servers a bench runs on, all on 127.0.0.1: an embedded
// nats-server with JetStream file storage (default sync interval) and,
// when asked for, a redis-server process with appendonly yes and
// appendfsync everysec. Close stops them.
type Servers struct {
	NATS    *server.Server
	NATSURL string
	// RedisURL is empty when no redis-server was started.
	RedisURL     string
	RedisVersion string
	redis        *child
	dir          string
}

// ErrNoRedis: redis-server is not installed.
var ErrNoRedis = errors.New("redis-server not found on PATH: install it (Debian: apt-get install redis-server), or run only the KV store without the floor (--store kv --skip-floor)")

// StartServers starts nats-server in dir/nats and, when withRedis,
// redis-server in dir/redis.
func StartServers(ctx context.Context, dir string, withRedis bool) (*Servers, error) {
	s := &Servers{dir: dir}
	ns, err := server.NewServer(&server.Options{
		ServerName: "durable-bench",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   filepath.Join(dir, "nats"),
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("nats-server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats-server did not start on 127.0.0.1")
	}
	s.NATS, s.NATSURL = ns, ns.ClientURL()
	if withRedis {
		if err := s.startRedis(ctx); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Servers) startRedis(ctx context.Context) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return ErrNoRedis
	}
	if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		s.RedisVersion = redisVersion(string(out))
	}
	rdir := filepath.Join(s.dir, "redis")
	if err := os.MkdirAll(rdir, 0o750); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(rdir, "redis.log"))
	if err != nil {
		return err
	}
	defer logf.Close() // the child keeps its own descriptor
	// A free port can be taken between our probe and redis-server's bind:
	// try a few.
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
			"--dir", rdir, "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
			"--protected-mode", "yes")
		cmd.Stdout, cmd.Stderr = logf, logf
		proc, err := startChild(cmd, nil)
		if err != nil {
			return fmt.Errorf("start redis-server: %w", err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitRedis(ctx, addr, proc.exitc); err != nil {
			proc.stop(0)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		s.redis = proc
		s.RedisURL = "redis://" + addr + "/0"
		return nil
	}
	log, _ := os.ReadFile(filepath.Join(rdir, "redis.log"))
	return fmt.Errorf("redis-server did not come up on 127.0.0.1: %s", tail(string(log), 5))
}

// waitRedis waits until redis-server answers PING at addr.
func waitRedis(ctx context.Context, addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			fmt.Fprintf(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("redis-server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("redis-server did not answer PING")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func redisVersion(out string) string {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return ""
}

// Close stops redis-server (SIGTERM: it flushes its AOF) and nats-server.
func (s *Servers) Close() {
	if s.redis != nil {
		s.redis.stop(5 * time.Second)
		s.redis = nil
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
		s.NATS.WaitForShutdown()
		s.NATS = nil
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// RedisPID is redis-server's process id, 0 when none runs.
func (s *Servers) RedisPID() int {
	if s.redis == nil {
		return 0
	}
	return s.redis.pid()
}
