package cli_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/fleet"
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
	rdb, err := cli.RedisClient(rc.URL())
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
	// Wait for the replica to hold every write (replication is async).
	time.Sleep(500 * time.Millisecond)
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
		if len(failing) == 0 || time.Since(promoted) > 3*time.Second {
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

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
