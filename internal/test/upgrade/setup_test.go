package upgrade

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

// redisPrefix is the key prefix of the Redis store in the fixtures.
const redisPrefix = "up"

// deploy starts a deployment on the data in dir: nats-server's store in
// dir/nats and, for the Redis store, redis-server's in dir/redis (its
// dump.rdb, loaded at start). Both are stopped when the test ends.
func deploy(t *testing.T, kind, dir string) *testfleet.Fleet {
	t.Helper()
	n := testenv.StartNATSAt(t, filepath.Join(dir, "nats"), -1)
	nc, js := n.Connect(t)
	f := &testfleet.Fleet{T: t, URL: n.URL, NC: nc, JS: js}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch kind {
	case "redis":
		rdir := filepath.Join(dir, "redis")
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			t.Fatal(err)
		}
		r := testenv.StartRedisServer(t, testenv.RedisDir(rdir))
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		f.Redis, f.RedisPrefix = rdb, redisPrefix
		f.Store = redisstore.New(rdb, redisstore.Options{Prefix: redisPrefix})
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f.Store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	f.Client = client.New(js, f.Store)
	return f
}
