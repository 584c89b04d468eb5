package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// Commit is two writes, checkpoint then run. These tests put another
// writer (or a crash) between them, on a real server, and check that the
// store ends where the worker's protocol expects it.

// commitRace creates run id at step 1 and returns it with a store A whose
// commits run between before its two writes, and a second store B on the
// same bucket (another worker).
func commitRace(t *testing.T, id string, between func(ctx context.Context, b *kvstore.Store, run checkpoint.Run)) (a, b *kvstore.Store, run checkpoint.Run) {
	t.Helper()
	js := connect(t)
	ctx := testCtx(t)
	a, bucket := newStore(t, js)
	b, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	run, err = a.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "w", Status: checkpoint.StatusRunning, Step: 1, StepName: "one"})
	if err != nil {
		t.Fatal(err)
	}
	kvstore.SetAfterCheckpoint(a, func(ctx context.Context) { between(ctx, b, run) })
	return a, b, run
}

// step1 is what a worker commits for step 1: the checkpoint and the run
// moved to step 2.
func step1(run checkpoint.Run, by string) (checkpoint.Run, checkpoint.Checkpoint) {
	next := run
	next.Step, next.StepName, next.Steps, next.Spend = 2, "two", run.Steps+1, run.Spend+0.5
	cp := checkpoint.Checkpoint{RunID: run.ID, Step: 1, Name: "one", Next: "two", Status: checkpoint.StatusRunning,
		State: []byte(`{"by":"` + by + `"}`), Attempt: 1, Spend: 0.5}
	return next, cp
}

// rollForward is what a worker does when Load finds checkpoint n with the
// run still at n (pkg/worker): move the run onto the checkpoint.
func rollForward(ctx context.Context, t *testing.T, s *kvstore.Store, id string, n int) {
	t.Helper()
	snap, err := s.Load(ctx, id, checkpoint.AtStep(n))
	if err != nil {
		t.Errorf("Load: %v", err)
		return
	}
	if snap.Current == nil || snap.Run.Step != n {
		t.Errorf("redelivery found run at step %d, checkpoint %v; want the checkpoint with the run lagging", snap.Run.Step, snap.Current)
		return
	}
	next := snap.Run
	next.Step, next.StepName = n+1, snap.Current.Next
	if _, err := s.UpdateRun(ctx, next); err != nil {
		t.Errorf("roll forward: %v", err)
	}
}

func mustCheckpoint(ctx context.Context, t *testing.T, s *kvstore.Store, id string, n int, want string) {
	t.Helper()
	cp, err := s.Checkpoint(ctx, id, n)
	if err != nil {
		t.Fatalf("Checkpoint(%s:%d): %v", id, n, err)
	}
	if string(cp.State) != want {
		t.Fatalf("Checkpoint(%s:%d) state %s, want %s (the first writer's)", id, n, cp.State, want)
	}
}

// A redelivery finds the checkpoint with the run still at the step and
// rolls the run forward before the committer's run update lands. The
// commit must not fail (the step is committed, by this writer) and must
// return the run as stored.
func TestCommitAfterRollForward(t *testing.T) {
	ctx := testCtx(t)
	a, _, run := commitRace(t, "rf-1", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		rollForward(ctx, t, b, run.ID, 1)
	})
	next, cp := step1(run, "a")
	got, err := a.Commit(ctx, next, cp)
	if err != nil {
		t.Fatalf("Commit after a roll-forward: %v", err)
	}
	stored, err := a.GetRun(ctx, "rf-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Rev != stored.Rev || stored.Step != 2 || stored.StepName != "two" || stored.Status != checkpoint.StatusRunning {
		t.Fatalf("Commit returned step %d rev %d; stored run %s at step %d rev %d", got.Step, got.Rev, stored.Status, stored.Step, stored.Rev)
	}
	mustCheckpoint(ctx, t, a, "rf-1", 1, `{"by":"a"}`)
}

// A cancel lands between the writes: the run stays cancelled, the commit
// reports ErrConflict, and the checkpoint stays, visible as the step's
// record. The run record is the truth: a worker acks the step as stale.
func TestCommitLosesToCancel(t *testing.T) {
	ctx := testCtx(t)
	a, _, run := commitRace(t, "cancel-1", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		cancelled := run
		cancelled.Status = checkpoint.StatusCancelled
		if _, err := b.UpdateRun(ctx, cancelled); err != nil {
			t.Errorf("cancel: %v", err)
		}
	})
	next, cp := step1(run, "a")
	_, err := a.Commit(ctx, next, cp)
	if !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("Commit that lost to a cancel: %v, want ErrConflict", err)
	}
	snap, err := a.Load(ctx, "cancel-1", checkpoint.AtStep(1))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Run.Status != checkpoint.StatusCancelled || snap.Run.Step != 1 || snap.Current == nil || string(snap.Current.State) != `{"by":"a"}` {
		t.Fatalf("after the race: run %s at step %d, checkpoint %+v; want cancelled at 1 with the commit's checkpoint", snap.Run.Status, snap.Run.Step, snap.Current)
	}
	all, err := a.Checkpoints(ctx, "cancel-1")
	if err != nil || len(all) != 1 {
		t.Fatalf("Checkpoints = %v, %v; want the one checkpoint", all, err)
	}
	// A late retry of the same step never overwrites it.
	_, err = a.Commit(ctx, next, checkpoint.Checkpoint{Step: 1, State: []byte(`{"by":"late"}`)})
	if !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("second Commit of step 1: %v, want ErrCheckpointExists", err)
	}
	mustCheckpoint(ctx, t, a, "cancel-1", 1, `{"by":"a"}`)
}

// Another writer records something on the run (an approver's audit entry)
// between the writes while the run still waits for the step: the commit
// moves the run onto its checkpoint and keeps that record.
func TestCommitKeepsConcurrentRecord(t *testing.T) {
	ctx := testCtx(t)
	a, _, run := commitRace(t, "audit-1", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		audited := run
		audited.Audit = []checkpoint.AuditEntry{{Kind: checkpoint.AuditRefused, Step: 1, By: "mallory"}}
		if _, err := b.UpdateRun(ctx, audited); err != nil {
			t.Errorf("audit: %v", err)
		}
	})
	next, cp := step1(run, "a")
	got, err := a.Commit(ctx, next, cp)
	if err != nil {
		t.Fatalf("Commit with a concurrent record: %v", err)
	}
	stored, err := a.GetRun(ctx, "audit-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Rev != got.Rev || stored.Step != 2 || stored.StepName != "two" || stored.Steps != 1 || stored.Spend != 0.5 ||
		len(stored.Audit) != 1 || stored.Audit[0].By != "mallory" {
		t.Fatalf("stored run = %+v (commit returned rev %d); want step 2, 1 step taken, spend 0.5 and the audit entry", stored, got.Rev)
	}
	mustCheckpoint(ctx, t, a, "audit-1", 1, `{"by":"a"}`)
}

// A crash between the writes (here: the commit's context ends) leaves the
// checkpoint with the run lagging it, which is what the worker's Load
// rolls forward; a second writer of the step loses.
func TestCommitCrashBetweenWrites(t *testing.T) {
	ctx := testCtx(t)
	cctx, crash := context.WithCancel(ctx)
	a, b, run := commitRace(t, "crash-1", func(context.Context, *kvstore.Store, checkpoint.Run) { crash() })
	next, cp := step1(run, "a")
	_, err := a.Commit(cctx, next, cp)
	if err == nil || errors.Is(err, checkpoint.ErrConflict) || errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("Commit cut between its writes: %v, want a non-sentinel error", err)
	}
	next, cp = step1(run, "b")
	if _, err := b.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("redelivery's Commit: %v, want ErrCheckpointExists", err)
	}
	rollForward(ctx, t, b, "crash-1", 1)
	stored, err := b.GetRun(ctx, "crash-1")
	if err != nil || stored.Step != 2 {
		t.Fatalf("run after roll-forward: %+v, %v", stored, err)
	}
	mustCheckpoint(ctx, t, b, "crash-1", 1, `{"by":"a"}`)
}

// A commit to a run that does not exist answers ErrNotFound and leaves
// its checkpoint: a removal would reopen the key to a second, different
// result, should the read that found no run be wrong. The key stays
// first-writer-wins.
func TestCommitUnknownRunKeepsCheckpoint(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newStore(t, js)
	ghost := checkpoint.Run{ID: "ghost-1", Status: checkpoint.StatusRunning, Step: 1, Rev: 1}
	next, cp := step1(ghost, "ghost")
	if _, err := s.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Commit to a missing run: %v, want ErrNotFound", err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "cp.ghost-1.1")
	if err != nil {
		t.Fatalf("checkpoint key of a missing run: %v, want it kept", err)
	}
	if string(e.Value()) == "" || e.Revision() == 0 {
		t.Fatalf("checkpoint key of a missing run: %+v", e)
	}
	next, cp = step1(ghost, "second")
	if _, err := s.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("second Commit to a missing run: %v, want ErrCheckpointExists", err)
	}
	mustCheckpoint(ctx, t, s, "ghost-1", 1, `{"by":"ghost"}`)
}

// A delete marker on a checkpoint key (older versions of this store left
// one after a commit to a missing run) does not block the step: a
// commit writes over it, and Load's probe reads through it.
func TestCommitOverDeleteMarker(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newStore(t, js)
	commitOverDeleteMarker(ctx, t, js, s, bucket)
}

// commitOverDeleteMarker leaves a delete marker on run marked-1's
// checkpoint key in bucket, then checks that s's Load reads through it and
// its Commit writes over it.
func commitOverDeleteMarker(ctx context.Context, t *testing.T, js jetstream.JetStream, s *kvstore.Store, bucket string) {
	t.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "cp.marked-1.1", []byte(`{"step":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "cp.marked-1.1"); err != nil {
		t.Fatal(err)
	}
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "marked-1", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := s.Load(ctx, "marked-1", checkpoint.AtStep(1)); err != nil || snap.Current != nil {
		t.Fatalf("Load(1) over a delete marker: current %+v, %v; want none", snap.Current, err)
	}
	next, cp := step1(run, "real")
	if _, err := s.Commit(ctx, next, cp); err != nil {
		t.Fatalf("Commit over a delete marker: %v", err)
	}
	mustCheckpoint(ctx, t, s, "marked-1", 1, `{"by":"real"}`)
}

// A commit refused for an existing checkpoint writes nothing at all.
func TestRefusedCommitWritesNothing(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, bucket := newStore(t, js)
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "once-1", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	next, cp := step1(run, "a")
	if _, err := s.Commit(ctx, next, cp); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	lastSeq := st.CachedInfo().State.LastSeq
	next, cp = step1(run, "b")
	if _, err := s.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("second Commit: %v, want ErrCheckpointExists", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != lastSeq {
		t.Fatalf("stream moved from seq %d to %d on a refused commit", lastSeq, info.State.LastSeq)
	}
}

// Load reads a first attempt's keys with one probe of the run's newest
// key; whatever else the run holds, it must read exactly what one get per
// key reads.
func TestLoadReadsWhatIsThere(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, _ := newStore(t, js)
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "probe", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := func(n int, current, previous string, calls, failures int) {
		t.Helper()
		snap, err := s.Load(ctx, "probe", checkpoint.AtStep(n))
		if err != nil {
			t.Fatalf("Load(%d): %v", n, err)
		}
		state := func(cp *checkpoint.Checkpoint) string {
			if cp == nil {
				return ""
			}
			return string(cp.State)
		}
		if state(snap.Current) != current || state(snap.Previous) != previous || len(snap.Journal) != calls || len(snap.Failures) != failures {
			t.Fatalf("Load(%d) = current %q previous %q, %d calls, %d failures; want %q %q %d %d",
				n, state(snap.Current), state(snap.Previous), len(snap.Journal), len(snap.Failures), current, previous, calls, failures)
		}
	}
	commit := func(n int) {
		t.Helper()
		next := run
		next.Step = n + 1
		if run, err = s.Commit(ctx, next, checkpoint.Checkpoint{Step: n, State: []byte(fmt.Sprintf(`{"n":%d}`, n))}); err != nil {
			t.Fatal(err)
		}
	}
	want(1, "", "", 0, 0)
	if _, err := s.RecordFailure(ctx, "probe", checkpoint.AtStep(1), checkpoint.Failure{Attempt: 1, Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	want(1, "", "", 0, 1)
	commit(1)
	want(1, `{"n":1}`, "", 0, 1)
	want(2, "", `{"n":1}`, 0, 0)
	want(5, "", "", 0, 0) // ahead of the run

	// A workflow named like the run: its key matches the probe.
	if err := s.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "probe", Version: 2}); err != nil {
		t.Fatal(err)
	}
	want(2, "", `{"n":1}`, 0, 0)
	if _, err := s.RecordCall(ctx, "probe", checkpoint.AtStep(2), checkpoint.CallRecord{Name: "llm", ArgsSHA256: "h"}); err != nil {
		t.Fatal(err)
	}
	want(2, "", `{"n":1}`, 1, 0)
	commit(2)
	want(3, "", `{"n":2}`, 0, 0)
	// A zombie of step 2 records a call after step 2 was committed.
	if _, err := s.RecordCall(ctx, "probe", checkpoint.AtStep(2), checkpoint.CallRecord{Name: "late", ArgsSHA256: "h"}); err != nil {
		t.Fatal(err)
	}
	want(3, "", `{"n":2}`, 0, 0)
	want(2, `{"n":2}`, `{"n":1}`, 2, 0)
	commit(3)
	want(4, "", `{"n":3}`, 0, 0)
	want(2, `{"n":2}`, `{"n":1}`, 2, 0) // a replay of an old step
}
