package kvstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
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

// A worker killed right after the record write of the commit that ends
// a run sends neither what it had queued, its count shard's write, nor
// what comes after the record, the marker of the run's running entry:
// another process's CountRuns then says running 1, completed 0, where
// the record says completed (TestCrashAtEveryBoundary/kv once saw this:
// its hung worker, whose other slots ran steps 7 and 9 of claim-0046,
// SIGKILLed as it ended the run). That is the drift the package doc describes for a crash
// between a record and its shard, and it converges as documented: the
// first listing of the running runs removes the stale entry, and the
// scheduler's recount corrects the completed count once it has found
// the difference twice, two minutes apart. Nothing else repairs it.
func TestCountsCrashAfterEndingCommit(t *testing.T) {
	srv := testenv.StartNATS(t)
	nc, js := srv.Connect(t)
	_, js2 := srv.Connect(t)
	ctx := testCtx(t)
	worker, bucket := newStore(t, js)
	r, err := worker.CreateRun(ctx, checkpoint.Run{ID: "claim-0046", Workflow: "claim", Status: running, Step: 9})
	if err != nil {
		t.Fatal(err)
	}
	kvstore.LoseCountWrites(worker, true) // queued, never sent
	kvstore.SetAfterRecord(worker, func(context.Context) { nc.Close() })
	r.Status = completed
	cp := checkpoint.Checkpoint{Step: 9, Name: "close", State: json.RawMessage(`{}`), Status: completed}
	if _, err := worker.Commit(ctx, r, cp); err != nil {
		t.Fatalf("commit cut after its record: %v, want it done", err)
	}

	s, err := kvstore.New(ctx, js2, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	if run, err := s.GetRun(ctx, "claim-0046"); err != nil || run.Status != completed {
		t.Fatalf("the record after the crash: %s, %v; want completed", run.Status, err)
	}
	got, err := s.CountRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status[running] != 1 || got.Status[completed] != 0 {
		t.Fatalf("CountRuns after the crash = %v, want running 1, completed 0 (the drift the doc describes)", got.Status)
	}
	if ids := listIDs(t, s, checkpoint.Filter{Status: running}); ids != "" {
		t.Fatalf("ListRuns(running) = %q, want none: a listing skips the stale entry", ids)
	}
	waitCounts(t, s, "the running listing read", map[checkpoint.Status]int64{}, nil)

	now := time.Now().Add(2 * time.Hour) // the recount is due
	for _, at := range []time.Time{now, now.Add(3 * time.Minute)} {
		if err := kvstore.MaintainCountsAt(ctx, s, at); err != nil {
			t.Fatal(err)
		}
	}
	waitCounts(t, s, "recounted twice", map[checkpoint.Status]int64{completed: 1}, map[string]map[checkpoint.Status]int64{"claim": {completed: 1}})
}
