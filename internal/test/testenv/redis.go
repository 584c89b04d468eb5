package testenv

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/proc"
)

// RedisServer is a redis-server a test started: a process it can kill,
// freeze and start again on the same port and data (see proc.Redis).
type RedisServer struct {
	*proc.Redis
}

// Redis is the server StartRedis starts.
type Redis = RedisServer

// RedisOption changes what StartRedisServer starts.
type RedisOption func(*proc.RedisConfig)

// RedisArgs adds redis-server arguments after testenv's own, which they
// may override: TLS (--tls-port ...), ACL users (--user ...),
// --requirepass.
func RedisArgs(args ...string) RedisOption {
	return func(c *proc.RedisConfig) { c.Args = append(c.Args, args...) }
}

// RedisUnixSocket makes the server listen on a unix socket in its dir
// instead of a TCP port (unless RedisArgs gives one); URL is unix://....
func RedisUnixSocket() RedisOption {
	return func(c *proc.RedisConfig) { c.Unix = true }
}

// RedisAOF turns the append-only file on with the appendfsync policy
// fsync: "always" (a restart loses nothing acknowledged) or "everysec".
func RedisAOF(fsync string) RedisOption {
	return func(c *proc.RedisConfig) { c.AOF = fsync }
}

// RedisClusterNode runs the server as a Redis Cluster node, on a port
// whose bus port is free too; nodeTimeout is cluster-node-timeout.
func RedisClusterNode(nodeTimeout time.Duration) RedisOption {
	return func(c *proc.RedisConfig) { c.ClusterNodeTimeout = nodeTimeout }
}

// RedisConfigFile starts the server from the config file at path; the
// port, bind address and dir are testenv's, persistence is the file's
// unless RedisAOF says otherwise.
func RedisConfigFile(path string) RedisOption {
	return func(c *proc.RedisConfig) { c.ConfigFile = path }
}

// RedisDir keeps the server's data and logs in dir rather than a temp dir.
func RedisDir(dir string) RedisOption {
	return func(c *proc.RedisConfig) { c.Dir = dir }
}

// StartRedisServer starts redis-server on a free 127.0.0.1 port, keeping
// nothing on disk, its dir a temp dir; opts change that. It waits until
// the server answers (PONG, or NOAUTH when it wants credentials) and kills
// it at cleanup. It fails the test loudly when redis-server is not
// installed.
func StartRedisServer(tb testing.TB, opts ...RedisOption) *RedisServer {
	tb.Helper()
	var cfg proc.RedisConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	r, err := proc.StartRedis(context.Background(), cfg)
	if errors.Is(err, exec.ErrNotFound) {
		tb.Fatalf("redis-server not found on PATH: install it (apt-get install redis-server) or run `make test`, which does")
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = r.Stop(0) })
	return &RedisServer{r}
}

// StartRedis starts a redis-server for a store test: on a unix socket,
// nothing on disk, extraArgs as RedisArgs.
func StartRedis(tb testing.TB, extraArgs ...string) *Redis {
	tb.Helper()
	return StartRedisServer(tb, RedisUnixSocket(), RedisArgs(extraArgs...))
}

// RedisCPU is the CPU time the redis-server behind client has used, user
// and system (INFO cpu): a benchmark reports its delta per op, which
// other processes on the machine blur less than the time an op takes.
func RedisCPU(tb testing.TB, client redis.UniversalClient) time.Duration {
	tb.Helper()
	info, err := client.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			sec, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu %s: %v", line, err)
			}
			total += time.Duration(sec * float64(time.Second))
		}
	}
	return total
}

// RedisCommandStat is how many times the redis-server behind client ran
// command (lower case: "evalsha", "mget"), the calls of scripts
// included, and the time it spent in them (INFO commandstats); zero for
// a command it has not run.
func RedisCommandStat(tb testing.TB, client redis.UniversalClient, command string) (calls int64, spent time.Duration) {
	tb.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		stats, ok := strings.CutPrefix(line, "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			switch {
			case k != "calls" && k != "usec":
			case err != nil:
				tb.Fatalf("INFO commandstats %s: %v", line, err)
			case k == "calls":
				calls = n
			default:
				spent = time.Duration(n) * time.Microsecond
			}
		}
	}
	return calls, spent
}
