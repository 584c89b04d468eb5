package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// startClient starts a redis-server for the test and returns a client on it.
func startClient(t *testing.T) *redis.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs redis-server")
	}
	srv := testenv.StartRedis(t)
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatalf("parse %s: %v", srv.URL, err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

var prefixes atomic.Int64

// uniquePrefix isolates one store on a shared server.
func uniquePrefix() string {
	return fmt.Sprintf("t%d", prefixes.Add(1))
}

func TestConformance(t *testing.T) {
	client := startClient(t)
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		return redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	})
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Every key a run touches must carry the run's hash tag, so the per-run
// scripts stay on one Redis Cluster slot.
func TestRunKeysShareOneSlot(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	prefix := uniquePrefix()
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	const id = "claim-0042"
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 3; n++ {
		if _, err := s.RecordCall(ctx, id, checkpoint.AtStep(n), checkpoint.CallRecord{Name: "model"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RecordFailure(ctx, id, checkpoint.AtStep(n), checkpoint.Failure{Attempt: 1, Error: "boom"}); err != nil {
			t.Fatal(err)
		}
		run.Step = n + 1
		if run, err = s.Commit(ctx, run, checkpoint.Checkpoint{Step: n, State: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "claim", Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.IndexDue(ctx, id, time.Now()); err != nil {
		t.Fatal(err)
	}

	keys, err := client.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := keySlot("{" + id + "}")
	var runKeys int
	for _, k := range keys {
		switch {
		case k == prefix+":workflows", k == prefix+":due":
			continue // global indexes, written outside the per-run scripts
		case strings.HasPrefix(k, prefix+":ix{"):
			continue // the run index, one hash tag per shard (index.go)
		}
		runKeys++
		if !strings.Contains(k, "{"+id+"}") {
			t.Errorf("key %q lacks the hash tag {%s}", k, id)
		}
		if got := keySlot(k); got != want {
			t.Errorf("key %q hashes to slot %d, want %d", k, got, want)
		}
	}
	// run + 3 checkpoints + 3 journals + 3 failure lists + 3 failure counts
	if runKeys != 13 {
		t.Errorf("found %d run keys, want 13: %v", runKeys, keys)
	}
}

// A run index entry whose run is gone is skipped, not an error.
func TestListRunsSkipsDanglingIndex(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	prefix := uniquePrefix()
	s := redisstore.New(client, redisstore.Options{Prefix: prefix})
	if _, err := s.CreateRun(ctx, checkpoint.Run{ID: "kept", Workflow: "w", Status: checkpoint.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	for k := range 16 { // whichever shard "gone" falls in
		if err := client.ZAdd(ctx, fmt.Sprintf("%s:ix{%d}:all", prefix, k), redis.Z{Score: 1, Member: "gone"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := s.ListRuns(ctx, checkpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].ID != "kept" {
		t.Fatalf("ListRuns = %+v, want only run kept", runs)
	}
	page, err := s.PageRuns(ctx, checkpoint.PageQuery{})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != "kept" {
		t.Fatalf("PageRuns = %+v, %v; want only run kept", page, err)
	}
}

func TestInvalidIDs(t *testing.T) {
	client := startClient(t)
	ctx := testCtx(t)
	s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	for _, id := range []string{"", "a.b", "a{b}", "a b", "a*", strings.Repeat("x", 129)} {
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: id}); err == nil {
			t.Errorf("CreateRun(%q) succeeded", id)
		}
	}
}

// keySlot is Redis Cluster's HASH_SLOT: CRC16-XMODEM of the hash tag (the
// part between the first '{' and the next '}', if not empty) mod 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestKeySlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]uint16{"foo": 12182, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": 8363} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}
