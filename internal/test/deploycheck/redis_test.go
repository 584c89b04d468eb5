package deploycheck

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
)

// redisDirectives reads redis.conf as redis-server does, one directive per
// line; a directive given twice keeps its last value (as Redis does for
// single-valued ones), and "user" lines are kept apart.
func redisDirectives(t testing.TB) (directives map[string]string, users []string) {
	t.Helper()
	directives = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, deployPath(t, "redis", "redis.conf"))))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, args, _ := strings.Cut(line, " ")
		name, args = strings.ToLower(name), strings.TrimSpace(args)
		if name == "user" {
			users = append(users, args)
			continue
		}
		directives[name] = args
	}
	return directives, users
}

func TestRedisConf(t *testing.T) {
	d, users := redisDirectives(t)
	for name, want := range map[string]string{
		"appendonly":       "yes",
		"appendfsync":      "everysec",
		"protected-mode":   "yes",
		"bind":             "0.0.0.0",
		"maxmemory-policy": "noeviction",
	} {
		if got := d[name]; got != want {
			t.Errorf("deploy/redis/redis.conf: %s %q, want %q", name, got, want)
		}
	}
	if _, ok := d["requirepass"]; ok {
		t.Errorf("deploy/redis/redis.conf: requirepass: passwords don't belong in the file (compose adds the ACL user)")
	}
	off := false
	for _, u := range users {
		f := strings.Fields(u)
		off = off || (len(f) > 1 && f[0] == "default" && strings.Contains(" "+u+" ", " off "))
	}
	if !off {
		t.Errorf("deploy/redis/redis.conf: want the default user switched off (user default off ...), got users %q", users)
	}
}

// A real redis-server starts with redis.conf and the ACL user the compose
// file adds, persists with AOF, refuses anonymous clients and admin
// commands, and the checkpoint store passes its conformance suite as
// that user.
func TestRedisConfRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs redis-server")
	}
	env := composeEnv(t)
	cmd := composeProject(t).Services["redis"].Command
	if len(cmd) < 2 {
		t.Fatalf("compose redis command %v", cmd)
	}
	// The file and the compose file's arguments, then only the addresses
	// and the data dir moved: no TCP port, a unix socket in the server's
	// temp dir.
	srv := testenv.StartRedisServer(t, testenv.RedisConfigFile(deployPath(t, "redis", "redis.conf")),
		testenv.RedisArgs(cmd[2:]...), testenv.RedisUnixSocket())
	log := func() string { return proc.LastLines(srv.Log(), 20) }

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := func(user, password string) *redis.Client {
		c := redis.NewClient(&redis.Options{Network: "unix", Addr: srv.Sock, Username: user, Password: password, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	anon := client("", "")
	if err := anon.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a client without credentials: PING = %v, want NOAUTH", err)
	}
	durable := client("durable", env["DURABLE_REDIS_PASSWORD"])
	if err := durable.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING as durable: %v\n%s", err, log())
	}
	info, err := durable.Info(ctx, "persistence").Result()
	if err != nil || !strings.Contains(info, "aof_enabled:1") {
		t.Errorf("INFO persistence as durable: %v, want aof_enabled:1 in:\n%s", err, info)
	}
	for _, c := range [][]any{{"CONFIG", "SET", "appendonly", "no"}, {"FLUSHALL"}, {"SET", "other:key", "x"}} {
		if err := durable.Do(ctx, c...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as durable: %v, want NOPERM", c, err)
		}
	}

	var n atomic.Int64
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		// Under the ACL's key pattern durable:*.
		return redisstore.New(durable, redisstore.Options{Prefix: fmt.Sprintf("durable:deploycheck%d", n.Add(1))})
	})
}
