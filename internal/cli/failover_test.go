package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/pkg/service"
)

// A Cluster client from a redis+cluster:// URL follows a failover as soon
// as the promoted replica serves: it re-reads the slot map when the dead
// primary can't be dialled, rather than up to a minute later (go-redis
// re-reads it on MOVED, which a dead node never sends).
func TestRedisClusterClientFollowsFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a Redis Cluster")
	}
	// go-redis logs each failed dial through its process-wide logger,
	// which an earlier runCLI left writing to that command's buffer.
	redis.SetLogger(discardLogger{})
	rc := fleet.StartRedisCluster(t, t.TempDir(), fleet.RedisClusterOptions{Primaries: 3, Replicas: 1})
	rdb, err := service.RedisClient(rc.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keys := make([]string, 60) // over every primary's slots
	for i := range keys {
		keys[i] = fmt.Sprintf("durable:{run-%d}:probe", i)
		if err := rdb.Set(ctx, keys[i], i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	primaries, err := rc.Primaries(ctx)
	if err != nil || len(primaries) != 3 {
		t.Fatalf("primaries: %v %v", primaries, err)
	}
	victim := primaries[0]
	replica := rc.ReplicaOf(ctx, victim)
	if replica == nil {
		t.Fatalf("%s has no replica", victim.Name)
	}
	// The replica must hold every write before the kill (replication is
	// async): waitReplicated writes once more on the primary and WAITs for
	// its replica to acknowledge it, and so everything written before.
	waitReplicated(ctx, t, victim.Addr, keys)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	// The client is in use while the primary is down, as a worker's is.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, k := range keys {
				_ = rdb.Get(ctx, k).Err()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := rc.WaitPrimary(ctx, replica); err != nil {
		close(stop)
		t.Fatal(err)
	}
	promoted := time.Now()
	var failing []string
	for {
		failing = failing[:0]
		for _, k := range keys {
			if err := rdb.Get(ctx, k).Err(); err != nil {
				failing = append(failing, k+": "+err.Error())
			}
		}
		// go-redis dials a dead node again about once a second and
		// reloads the slot map at most every 200ms after that: allow a
		// few rounds of both on a busy machine.
		if len(failing) == 0 || time.Since(promoted) > 10*time.Second {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	<-done
	if len(failing) > 0 {
		t.Fatalf("%s after %s was promoted, %d keys still fail:\n%s", time.Since(promoted).Round(time.Millisecond), replica.Name, len(failing), strings.Join(failing[:min(5, len(failing))], "\n"))
	}
	t.Logf("every key served %s after the promotion of %s", time.Since(promoted).Round(time.Millisecond), replica.Name)
}

// waitReplicated sets one of keys that primary serves again (to the same
// value, its index) on one connection, then WAITs on that connection for
// a replica to acknowledge it: WAIT counts the offset of the connection's
// own last write, and a replica applies writes in order.
func waitReplicated(ctx context.Context, tb testing.TB, primary string, keys []string) {
	tb.Helper()
	cl := redis.NewClient(&redis.Options{Addr: primary})
	defer cl.Close()
	conn := cl.Conn()
	defer conn.Close()
	for i, k := range keys {
		if err := conn.Set(ctx, k, i, 0).Err(); err != nil {
			continue // MOVED: another primary serves k
		}
		n, err := conn.Do(ctx, "WAIT", 1, 5000).Int64()
		if err != nil || n < 1 {
			tb.Fatalf("WAIT 1 5000 on %s: %d replicas acknowledged, %v", primary, n, err)
		}
		return
	}
	tb.Fatalf("%s serves none of the keys", primary)
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
