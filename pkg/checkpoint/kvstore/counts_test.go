package kvstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// A crash between a record write and its count shard's write (dropped
// here) leaves the counts of ended runs off by the runs it moved; the
// recount corrects them once it has found the same difference twice,
// two minutes apart. The shards idle for an hour are folded into the
// base and deleted, the counts unchanged; a bucket
// without a base (written by a version that did not count) is counted
// by its entries until the first recount writes one.
func TestCountsRecount(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newStore(t, js)
	end := func(s *kvstore.Store, id string, to checkpoint.Status) {
		t.Helper()
		r, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Status: running, Step: 1})
		if err != nil {
			t.Fatal(err)
		}
		r.Status = to
		if _, err := s.UpdateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		end(s, fmt.Sprintf("a%d", i), completed)
	}
	kvstore.LoseCountWrites(s, true)
	end(s, "lost1", completed)
	end(s, "lost2", failed)
	kvstore.LoseCountWrites(s, false)
	waitCounts(t, s, "two shard writes lost", map[checkpoint.Status]int64{completed: 3}, nil)

	other, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	end(other, "b1", checkpoint.StatusCancelled)
	exact := map[checkpoint.Status]int64{completed: 4, failed: 1, checkpoint.StatusCancelled: 1}

	now := time.Now().Add(2 * time.Hour) // the recount is due, the shards idle for an hour
	if err := kvstore.MaintainCountsAt(ctx, s, now); err != nil {
		t.Fatal(err)
	}
	// Found once, not corrected yet; the other shard folded.
	waitCounts(t, s, "after one recount", map[checkpoint.Status]int64{completed: 3, checkpoint.StatusCancelled: 1}, nil)
	if err := kvstore.MaintainCountsAt(ctx, s, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, s, "found again a minute later", map[checkpoint.Status]int64{completed: 3, checkpoint.StatusCancelled: 1}, nil)
	if err := kvstore.MaintainCountsAt(ctx, s, now.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, s, "confirmed", exact, nil)

	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	// Both shards were idle for an hour at the recount's clock: folded.
	// (A process idle that long starts a new shard: s writes no more.)
	if keys := countKeys(t, kv); len(keys) != 1 {
		t.Fatalf("count keys after the fold: %v, want the base alone", keys)
	}
	s, err = kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "run.=ix.c.="); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, s, "no base: counted by the entries", exact, map[string]map[checkpoint.Status]int64{"claim": exact})
	if err := kvstore.MaintainCountsAt(ctx, s, time.Now()); err != nil {
		t.Fatal(err)
	}
	end(s, "c1", completed)
	exact[completed]++
	waitCounts(t, s, "base written again", exact, map[string]map[checkpoint.Status]int64{"claim": exact})
	if keys := countKeys(t, kv); len(keys) != 2 {
		t.Fatalf("count keys after the recount of a bucket without base: %v", keys)
	}
}

func countKeys(t *testing.T, kv jetstream.KeyValue) []string {
	t.Helper()
	lister, err := kv.ListKeysFiltered(testCtx(t), "run.=ix.c.*")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	return keys
}
