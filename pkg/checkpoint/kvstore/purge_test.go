package kvstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// retentionStores are the two ways a store commits: two writes (a
// one-replica file bucket) and atomic batches (a memory bucket).
func retentionStores(t *testing.T, js jetstream.JetStream) map[string]func() (*kvstore.Store, string) {
	return map[string]func() (*kvstore.Store, string){
		"TwoWrites": func() (*kvstore.Store, string) { return newStore(t, js) },
		"Batches":   func() (*kvstore.Store, string) { return newBatchStore(t, js) },
	}
}

// keysOf lists the keys of the bucket that name run id (a token of the
// key is the id: its keys and its index entries), with the kind of their
// newest message: "" for a value, else the marker's operation. A key
// whose messages are all gone is not listed.
func keysOf(t *testing.T, js jetstream.JetStream, bucket, id string) map[string]string {
	t.Helper()
	ctx := testCtx(t)
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := "$KV." + bucket + "."
	keys := map[string]string{}
	for subject := range info.State.Subjects {
		key := strings.TrimPrefix(subject, prefix)
		if !slices.Contains(strings.Split(key, "."), id) {
			continue
		}
		msg, err := st.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // gone meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		keys[key] = msg.Header.Get("KV-Operation") + msg.Header.Get("Nats-Marker-Reason")
	}
	return keys
}

// onlyKeys waits until the keys that name run id are exactly want (each a
// value): the markers a purge or a late writer leaves expire within a
// couple of seconds.
func onlyKeys(t *testing.T, js jetstream.JetStream, bucket, id string, want ...string) {
	t.Helper()
	wanted := map[string]string{}
	for _, k := range want {
		wanted[k] = ""
	}
	var got map[string]string
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = keysOf(t, js, bucket, id)
		if fmt.Sprint(got) == fmt.Sprint(wanted) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys of %s: %v, want only %v", id, got, wanted)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fullRun writes every kind of key a run can have: its record, step and
// branch checkpoints, journals and failures of both, a fan-out's spend,
// audit entries and a decision moved off the record with a payload kept
// apart, a liveness mark and a removed deadline (its delete marker); and
// ends it, an hour and a half ago.
func fullRun(t *testing.T, s *kvstore.Store, id string) checkpoint.Run {
	t.Helper()
	ctx := testCtx(t)
	ended := time.Now().UTC().Add(-90 * time.Minute)
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1, StepName: "split", CreatedAt: ended.Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.RecordCall(ctx, id, checkpoint.AtStep(1), checkpoint.CallRecord{Name: "model", Result: json.RawMessage(`"ok"`)})
	must(err)
	_, err = s.RecordFailure(ctx, id, checkpoint.AtStep(1), checkpoint.Failure{Attempt: 1, Error: "boom"})
	must(err)
	fan := checkpoint.Checkpoint{Step: 1, Name: "split", State: json.RawMessage(`{}`), Status: checkpoint.StatusRunning, Gen: run.Resumes,
		FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "pay"}, {Step: "pay"}}}}
	next := run
	next.Step, next.StepName = 2, "join"
	run, err = s.Commit(ctx, next, fan)
	must(err)
	for i := 1; i <= 2; i++ {
		_, err = s.RecordCall(ctx, id, checkpoint.AtBranch(2, i), checkpoint.CallRecord{Name: "pay"})
		must(err)
		_, err = s.RecordFailure(ctx, id, checkpoint.AtBranch(2, i), checkpoint.Failure{Attempt: 1, Error: "slow"})
		must(err)
		_, err = s.CommitBranch(ctx, checkpoint.Checkpoint{RunID: id, Step: 2, Branch: i, Of: 2, Name: "pay", State: json.RawMessage(`{}`), Spend: 0.5})
		must(err)
	}
	must(s.MarkAlive(ctx, id, time.Now()))
	must(s.IndexDue(ctx, id, time.Now().Add(time.Hour)))
	must(s.UnindexDue(ctx, id))
	for i := range checkpoint.AuditKept + 20 {
		run.Audit = append(run.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditSignal, Step: 1, At: ended, Reason: fmt.Sprint("entry ", i)})
	}
	payload := json.RawMessage(`"` + strings.Repeat("x", checkpoint.InlineBytes+100) + `"`)
	run.Approvals = append(run.Approvals, checkpoint.Approval{Step: 1, By: "bob", At: ended, Decision: checkpoint.DecisionApproved, Channel: "api", PayloadSHA256: checkpoint.SHA256Hex(payload), Payload: payload})
	run, err = s.UpdateRun(ctx, run)
	must(err)
	run.Status, run.UpdatedAt = checkpoint.StatusCompleted, ended
	run, err = s.Commit(ctx, run, checkpoint.Checkpoint{Step: 2, Name: "join", State: json.RawMessage(`{}`), Status: checkpoint.StatusCompleted, Gen: run.Resumes})
	must(err)
	return run
}

// A purge leaves nothing of the run but its tombstone and the entry that
// counts it: no checkpoint, journal, failures, branch key, spend, log,
// liveness mark, deadline marker or index entry, and no marker of their
// removal for long; another run's keys (one whose id the run's is a
// prefix of) and a workflow named like the run stay. Without a
// tombstone, nothing at all is left.
func TestPurgeLeavesOnlyTheTombstone(t *testing.T) {
	js := connect(t)
	for name, open := range retentionStores(t, js) {
		t.Run(name, func(t *testing.T) {
			s, bucket := open()
			ctx := testCtx(t)
			victim, bystander, free := fullRun(t, s, "victim"), fullRun(t, s, "victim1"), fullRun(t, s, "free")
			if err := s.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "victim", Version: 1, FirstStep: "a", Steps: []string{"a"}}); err != nil {
				t.Fatal(err)
			}
			// The markers that removed the bystander's old entries expire
			// meanwhile: compare its keys once they have.
			var before map[string]string
			testenv.Eventually(t, 10*time.Second, "the bystander's markers to expire", func() bool {
				before = keysOf(t, js, bucket, "victim1")
				return !strings.Contains(fmt.Sprint(before), ":PURGE")
			})
			for _, k := range []string{"cp.victim.1", "cp.victim.2", "cp.victim.2.1", "j.victim.2.2", "f.victim.1", "f.victim.2.1", "sp.victim.2.branches", "alive.victim", "due.victim", "run.victim.a.0", "run.victim.b." + victim.Approvals[0].PayloadBlob} {
				if _, ok := keysOf(t, js, bucket, "victim")[k]; !ok {
					t.Fatalf("the run's history has no key %s, nothing to purge: %v", k, keysOf(t, js, bucket, "victim"))
				}
			}

			if err := s.Purge(ctx, victim, time.Hour); err != nil {
				t.Fatal(err)
			}
			onlyKeys(t, js, bucket, "victim", "run.victim", "run.=ix.t.victim", "wf.victim.1")
			st, err := js.Stream(ctx, "KV_"+bucket)
			if err != nil {
				t.Fatal(err)
			}
			tomb, err := st.GetLastMsgForSubject(ctx, "$KV."+bucket+".run.victim")
			if err != nil {
				t.Fatal(err)
			}
			if ttl := tomb.Header.Get("Nats-TTL"); ttl != "3600s" || len(tomb.Data) > 100 {
				t.Errorf("tombstone %q (%d bytes) with TTL %q, want under 100 bytes and 3600s", tomb.Data, len(tomb.Data), ttl)
			}
			if got := keysOf(t, js, bucket, "victim1"); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("another run's keys moved: %v, were %v", got, before)
			}
			if _, err := s.GetRun(ctx, bystander.ID); err != nil {
				t.Errorf("another run: %v", err)
			}

			if err := s.Purge(ctx, free, 0); err != nil {
				t.Fatal(err)
			}
			onlyKeys(t, js, bucket, "free")
			if n, err := s.Tombstones(ctx); err != nil || n != 1 {
				t.Errorf("Tombstones = %d, %v; want 1", n, err)
			}
		})
	}
}

// A worker that read the run before it ended and was purged commits after
// the purge: the commit finds the run purged (ErrNotFound, ErrPurged),
// and what it wrote is gone again, so that nothing of it waits for a run
// of the same id once the tombstone expires. A late read finds no run.
func TestLateWriterAfterPurge(t *testing.T) {
	js := connect(t)
	for name, open := range retentionStores(t, js) {
		t.Run(name, func(t *testing.T) {
			s, bucket := open()
			ctx := testCtx(t)
			if _, err := s.CreateRun(ctx, checkpoint.Run{ID: "late", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1}); err != nil {
				t.Fatal(err)
			}
			// The late worker is a process of its own, which read the run
			// at step 1 (its cache holds that revision).
			worker, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
			if err != nil {
				t.Fatal(err)
			}
			if batches := kvstore.Batches(s); kvstore.Batches(worker) != batches {
				t.Fatalf("the worker commits in batches: %v, the store %v", !batches, batches)
			}
			snap, err := worker.Load(ctx, "late", checkpoint.AtStep(1))
			if err != nil {
				t.Fatal(err)
			}
			ended := snap.Run
			ended.Status, ended.UpdatedAt = checkpoint.StatusCancelled, time.Now().Add(-2*time.Hour)
			ended, err = s.UpdateRun(ctx, ended)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Purge(ctx, ended, time.Hour); err != nil {
				t.Fatal(err)
			}

			next := snap.Run
			next.Step = 2
			_, err = worker.Commit(ctx, next, checkpoint.Checkpoint{Step: 1, Name: "a", State: json.RawMessage(`{}`), Status: checkpoint.StatusRunning, Gen: snap.Run.Resumes})
			if !errors.Is(err, checkpoint.ErrNotFound) || !errors.Is(err, checkpoint.ErrPurged) {
				t.Fatalf("late commit = %v, want ErrNotFound and ErrPurged", err)
			}
			if _, err := worker.Load(ctx, "late", checkpoint.AtStep(2)); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("late Load = %v, want ErrNotFound", err)
			}
			if _, err := worker.RecordFailure(ctx, "late", checkpoint.AtStep(2), checkpoint.Failure{Attempt: 1, Error: "x"}); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("late RecordFailure = %v, want ErrNotFound", err)
			}
			if _, err := worker.CommitBranch(ctx, checkpoint.Checkpoint{RunID: "late", Step: 2, Branch: 1, Of: 1, State: json.RawMessage(`{}`)}); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Errorf("late CommitBranch = %v, want ErrNotFound", err)
			}
			onlyKeys(t, js, bucket, "late", "run.late", "run.=ix.t.late")
		})
	}
}

// A purge that stops after its tombstone (a scheduler killed) leaves the
// run's keys and index entries; EndedBefore, reading a status entry whose
// record is a tombstone older than finishAfter, finishes it. The
// creation entries, which the tombstone does not name, go when a listing
// by creation reads them.
func TestStoppedPurgeIsFinished(t *testing.T) {
	js := connect(t)
	s, bucket := newStore(t, js)
	run := fullRun(t, s, "stopped")
	ctx, cancel := context.WithCancel(testCtx(t))
	kvstore.SetAfterTomb(s, func(context.Context) { cancel() })
	if err := s.Purge(ctx, run, time.Hour); err == nil {
		t.Fatal("Purge went on after its context ended")
	}
	kvstore.SetAfterTomb(s, nil)
	if _, err := s.GetRun(testCtx(t), "stopped"); !errors.Is(err, checkpoint.ErrPurged) {
		t.Fatalf("GetRun after the tombstone: %v, want ErrPurged", err)
	}
	if _, ok := keysOf(t, js, bucket, "stopped")["cp.stopped.1"]; !ok {
		t.Fatal("the stopped purge deleted the checkpoints: nothing left to finish")
	}
	// Under way for less than finishAfter: left to its purger.
	if ended, err := s.EndedBefore(testCtx(t), time.Now(), 10); err != nil || len(ended) != 0 {
		t.Fatalf("EndedBefore = %v, %v; want none", ended, err)
	}
	if _, ok := keysOf(t, js, bucket, "stopped")["cp.stopped.1"]; !ok {
		t.Fatal("EndedBefore finished a purge under way")
	}
	kvstore.SetFinishAfter(s, 0)
	if ended, err := s.EndedBefore(testCtx(t), time.Now(), 10); err != nil || len(ended) != 0 {
		t.Fatalf("EndedBefore = %v, %v; want none", ended, err)
	}
	counts, err := s.CountRuns(testCtx(t))
	if err != nil || counts.Total() != 0 {
		t.Errorf("CountRuns after the purge finished: %+v, %v; want none", counts.Status, err)
	}
	if page, err := s.PageRuns(testCtx(t), checkpoint.PageQuery{}); err != nil || len(page.Runs) != 0 {
		t.Errorf("PageRuns = %v, %v; want none", page.Runs, err)
	}
	onlyKeys(t, js, bucket, "stopped", "run.stopped", "run.=ix.t.stopped")
}

// Once its tombstone expires, a purged id is free: a new run of it starts
// from nothing.
func TestTombstoneExpires(t *testing.T) {
	js := connect(t)
	s, bucket := newStore(t, js)
	ctx := testCtx(t)
	run := fullRun(t, s, "reused")
	if err := s.Purge(ctx, run, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRun(ctx, checkpoint.Run{ID: "reused", Status: checkpoint.StatusRunning, Step: 1}); !errors.Is(err, checkpoint.ErrRunExists) {
		t.Fatalf("CreateRun while the tombstone is kept: %v, want ErrRunExists", err)
	}
	if n, err := s.Tombstones(ctx); err != nil || n != 1 {
		t.Fatalf("Tombstones while it is kept = %d, %v; want 1", n, err)
	}
	testenv.Eventually(t, 10*time.Second, "the tombstone to expire", func() bool {
		_, err := s.GetRun(ctx, "reused")
		return errors.Is(err, checkpoint.ErrNotFound) && !errors.Is(err, checkpoint.ErrPurged)
	})
	// The count of tombstones is a counter: the recount takes the expired
	// one out once it found it gone twice, two minutes apart.
	// (Its count entry expires by its own TTL, a moment after it.)
	at := time.Now().Add(2 * time.Hour)
	testenv.Eventually(t, 10*time.Second, "the recount to take out the expired tombstone", func() bool {
		at = at.Add(10 * time.Minute)
		for _, when := range []time.Time{at, at.Add(3 * time.Minute)} {
			if err := kvstore.MaintainCountsAt(ctx, s, when); err != nil {
				t.Fatal(err)
			}
		}
		n, err := s.Tombstones(ctx)
		return err == nil && n == 0
	})
	fresh, err := s.CreateRun(ctx, checkpoint.Run{ID: "reused", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatalf("CreateRun of an expired tombstone's id: %v", err)
	}
	snap, err := s.Load(ctx, "reused", checkpoint.AtStep(2))
	if err != nil || snap.Previous != nil || snap.Current != nil || len(snap.Journal) != 0 || len(snap.Failures) != 0 || snap.Run.Rev != fresh.Rev {
		t.Fatalf("the new run finds the old one's keys: %+v, %v", snap, err)
	}
	onlyKeys(t, js, bucket, "reused", keysOfFresh(t, js, bucket)...)
}

// Tombstones reads the counters, not the tombstones: on a bucket whose
// base of the counts was written by a version that did not count them
// (no tombstones' pair), it counts the tombstones' entries until the
// first recount of this version adds the pair; from then on a purge
// counts its tombstone in its shard.
func TestTombstonesCountedAfterUpgrade(t *testing.T) {
	js := connect(t)
	s, bucket := newStore(t, js)
	ctx := testCtx(t)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	// The base as the previous version wrote it.
	if _, err := kv.Put(ctx, "run.=ix.c.=", []byte(`{"c":{},"at":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-1", "old-2"} {
		if err := s.Purge(ctx, fullRun(t, s, id), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	fresh, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket}) // no shard of its own
	if err != nil {
		t.Fatal(err)
	}
	if n, err := fresh.Tombstones(ctx); err != nil || n != 2 {
		t.Fatalf("Tombstones on the old base = %d, %v; want 2, counted from the entries", n, err)
	}
	if err := kvstore.MaintainCountsAt(ctx, fresh, time.Now()); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "run.=ix.c.=")
	if err != nil || !strings.Contains(string(e.Value()), `"=tomb.":`) {
		t.Fatalf("base after the recount: %s, %v; want the tombstones' pair", e.Value(), err)
	}
	if err := fresh.Purge(ctx, fullRun(t, fresh, "new-1"), time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*kvstore.Store{s, fresh} {
		if n, err := st.Tombstones(ctx); err != nil || n != 3 {
			t.Fatalf("Tombstones from the counters = %d, %v; want 3", n, err)
		}
	}
}

// keysOfFresh are the keys of a run "reused" just created in workflow
// claim: its record and its entries by creation and status.
func keysOfFresh(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	var keys []string
	for k, op := range keysOf(t, js, bucket, "reused") {
		if op == "" && (k == "run.reused" || strings.HasPrefix(k, "run.=ix.")) {
			keys = append(keys, k)
		}
	}
	if len(keys) != 3 { // the record, its creation entry, its live entry
		t.Fatalf("a new run's keys: %v", keys)
	}
	return keys
}

// Purging a listing's old entries empties its directories: the next walk
// removes them (those whose time ended over an hour ago), so that a walk
// does not read them again and again, in the listings EndedBefore walks
// and in those it sweeps when done (by creation, by workflow). A run
// that ends later at a time under a removed directory is still found:
// its write stores the directories again.
func TestEndedBeforeRemovesEmptyDirectories(t *testing.T) {
	js := connect(t)
	s, bucket := newStore(t, js)
	ctx := testCtx(t)
	t0 := time.Now().UTC().Add(-3 * time.Hour)
	for i := range 20 {
		at := t0.Add(time.Duration(i) * 5 * time.Second)
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprintf("old-%02d", i), Workflow: "w", Status: checkpoint.StatusCompleted, Step: 1, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	ended, err := s.EndedBefore(ctx, time.Now(), 100)
	if err != nil || len(ended) != 20 {
		t.Fatalf("EndedBefore = %d runs, %v; want 20", len(ended), err)
	}
	for _, r := range ended {
		if err := s.Purge(ctx, r, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	// Every time listing: of the status (EndedBefore's), by creation,
	// by workflow (the sweep's).
	dirs := func() []string {
		st, err := js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("$KV."+bucket+".run.=ix.>"))
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for subject := range info.State.Subjects {
			key := strings.TrimPrefix(subject, "$KV."+bucket+".run.=ix.")
			for _, level := range []string{".d0.", ".d1.", ".d2.", ".e."} {
				if strings.Contains(key, level) {
					keys = append(keys, key)
				}
			}
		}
		return keys
	}
	if len(dirs()) == 0 {
		t.Fatal("no directories before the walk")
	}
	kvstore.SweepNow(s) // the first EndedBefore swept a minute's turn
	if ended, err := s.EndedBefore(ctx, time.Now(), 100); err != nil || len(ended) != 0 {
		t.Fatalf("EndedBefore after the purges = %v, %v; want none", ended, err)
	}
	testenv.Eventually(t, 10*time.Second, "the empty directories and their markers to go", func() bool { return len(dirs()) == 0 })

	if _, err := s.CreateRun(ctx, checkpoint.Run{ID: "old-again", Workflow: "w", Status: checkpoint.StatusCompleted, Step: 1, CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if ended, err := s.EndedBefore(ctx, time.Now(), 100); err != nil || len(ended) != 1 || ended[0].ID != "old-again" {
		t.Fatalf("EndedBefore after a run ended under a removed directory = %v, %v; want old-again", ended, err)
	}
}

// A burst of runs that ended within one leaf's 16 ms, more than one read
// returns (1024), is read a millisecond at a time, and within one as far
// as EndedBefore needs: earliest first, every run once.
func TestEndedBeforeReadsABurst(t *testing.T) {
	js := connect(t)
	s, _ := newStore(t, js)
	ctx := testCtx(t)
	t0 := time.UnixMilli(time.Now().Add(-2*time.Hour).UnixMilli() &^ 15).UTC() // a leaf's first millisecond
	create := func(id string, at time.Time) {
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "w", Status: checkpoint.StatusCompleted, Step: 1, CreatedAt: at, UpdatedAt: at}); err != nil {
			t.Error(err)
		}
	}
	const burst = 1100
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < burst; i += 16 {
				create(fmt.Sprintf("burst-%04d", i), t0.Add(3*time.Millisecond))
			}
		})
	}
	wg.Wait()
	create("first", t0.Add(2*time.Millisecond))
	create("last", t0.Add(9*time.Millisecond))
	create("later", t0.Add(time.Second))

	first, err := s.EndedBefore(ctx, time.Now(), 3)
	if err != nil || len(first) != 3 || first[0].ID != "first" || !strings.HasPrefix(first[1].ID, "burst-") {
		t.Fatalf("EndedBefore(3) = %v, %v; want first, then two of the burst", runIDs(first), err)
	}
	all, err := s.EndedBefore(ctx, time.Now(), 2000)
	if err != nil || len(all) != burst+3 {
		t.Fatalf("EndedBefore(2000) = %d runs, %v; want %d", len(all), err, burst+3)
	}
	seen := map[string]bool{}
	for i, r := range all {
		if seen[r.ID] || (i > 0 && r.UpdatedAt.Before(all[i-1].UpdatedAt)) {
			t.Fatalf("EndedBefore(2000): %s at %d listed twice or out of order", r.ID, i)
		}
		seen[r.ID] = true
	}
	if all[burst+1].ID != "last" || all[burst+2].ID != "later" {
		t.Fatalf("EndedBefore(2000) ends with %v, want last, later", runIDs(all[burst+1:]))
	}
}

func runIDs(runs []checkpoint.Run) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids
}

// TestPurgeAnswer: a success is taken without decoding; anything else is
// decoded, and a refusal or an error is one.
func TestPurgeAnswer(t *testing.T) {
	for _, tc := range []struct {
		answer string
		ok     bool
	}{
		{`{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":1}`, true},
		{`{"type":"io.nats.jetstream.api.v1.stream_purge_response","success":true,"purged":0}`, true},
		{`{"success": true}`, true},
		{`{"type":"io.nats.jetstream.api.v1.stream_purge_response","error":{"code":503,"err_code":10039,"description":"jetstream not enabled for account"},"success":false,"purged":0}`, false},
		{`{"type":"x","error":{"code":500,"err_code":10134,"description":"\"success\":true"},"success":false}`, false},
		{`{"success":false}`, false},
		{`not json`, false},
	} {
		if err := kvstore.PurgeAnswer([]byte(tc.answer)); (err == nil) != tc.ok {
			t.Errorf("answer %s: %v, want ok %v", tc.answer, err, tc.ok)
		}
	}
}
