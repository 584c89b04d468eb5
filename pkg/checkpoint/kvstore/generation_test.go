package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// A checkpoint belongs to the resume generation its attempt ran under
// (Checkpoint.Gen = Run.Resumes). These tests put a park and a decision
// between a commit's two writes, on a real server, and check that an
// attempt from before the decision never becomes the step's result.

// decide is what the approver does to a run parked at its step: record
// the decision and resume it at the same step, one generation later.
func decide(ctx context.Context, t *testing.T, s *kvstore.Store, id string, decision checkpoint.Verdict) checkpoint.Run {
	t.Helper()
	run, err := s.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	run.Status, run.Wait, run.Resumes = checkpoint.StatusRunning, nil, run.Resumes+1
	run.Approvals = append(run.Approvals, checkpoint.Approval{Step: run.Step, By: "carol", Decision: decision, Channel: "http"})
	if run, err = s.UpdateRun(ctx, run); err != nil {
		t.Fatalf("decide: %v", err)
	}
	return run
}

// park is what a worker does when the step asks for approval.
func park(ctx context.Context, t *testing.T, s *kvstore.Store, id string) {
	t.Helper()
	run, err := s.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	run.Status = checkpoint.StatusWaiting
	run.Wait = &checkpoint.Wait{Step: run.Step, StepName: run.StepName, PayloadSHA256: "p"}
	if _, err := s.UpdateRun(ctx, run); err != nil {
		t.Errorf("park: %v", err)
	}
}

// An attempt of step 1 began before the run parked at step 1; the run
// was rejected and resumed before the attempt's run write. The run must
// stay where the decision left it (a rejected run never proceeds), the
// checkpoint must not pass for step 1's result, and the resumed step's
// commit replaces it.
func TestCommitLosesToDecision(t *testing.T) {
	ctx := testCtx(t)
	a, b, run := commitRace(t, "reject-1", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		park(ctx, t, b, run.ID)
		decide(ctx, t, b, run.ID, checkpoint.DecisionRejected)
	})
	next, cp := step1(run, "before")
	if _, err := a.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("Commit from before the decision: %v, want ErrConflict", err)
	}
	snap, err := b.Load(ctx, "reject-1", checkpoint.AtStep(1))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Run.Status != checkpoint.StatusRunning || snap.Run.Step != 1 || snap.Run.Resumes != 1 || len(snap.Run.Approvals) != 1 {
		t.Fatalf("run after the race: %s at step %d, resumes %d, approvals %v; want running at 1 as the decision left it",
			snap.Run.Status, snap.Run.Step, snap.Run.Resumes, snap.Run.Approvals)
	}
	if snap.Current == nil || snap.Current.Gen != 0 {
		t.Fatalf("Load(1).Current = %+v; want the earlier generation's checkpoint, kept", snap.Current)
	}

	// The resumed step runs again and commits under generation 1.
	kvstore.SetAfterCheckpoint(a, nil)
	next, cp = step1(snap.Run, "after")
	cp.Gen = snap.Run.Resumes
	got, err := b.Commit(ctx, next, cp)
	if err != nil {
		t.Fatalf("Commit of the resumed step over the earlier generation: %v", err)
	}
	if got.Step != 2 || got.Resumes != 1 {
		t.Fatalf("Commit returned step %d resumes %d", got.Step, got.Resumes)
	}
	mustCheckpoint(ctx, t, b, "reject-1", 1, `{"by":"after"}`)

	// A zombie of generation 0 can neither create nor replace it.
	next, cp = step1(run, "zombie")
	if _, err := a.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrCheckpointExists) {
		t.Fatalf("Commit of generation 0 over generation 1: %v, want ErrCheckpointExists", err)
	}
	mustCheckpoint(ctx, t, b, "reject-1", 1, `{"by":"after"}`)

	// Load's probe meets the rewritten key as the run's newest message.
	snap, err = b.Load(ctx, "reject-1", checkpoint.AtStep(2))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Previous == nil || string(snap.Previous.State) != `{"by":"after"}` || snap.Previous.Gen != 1 || snap.Current != nil {
		t.Fatalf("Load(2) = previous %+v current %+v; want the resumed step's checkpoint", snap.Previous, snap.Current)
	}
}

// The run parks between the writes and is decided only after the commit
// settled: the commit is refused (the run is waiting), and once resumed
// the step's commit replaces the stale checkpoint.
func TestCommitLosesToPark(t *testing.T) {
	ctx := testCtx(t)
	a, b, run := commitRace(t, "park-1", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		park(ctx, t, b, run.ID)
	})
	next, cp := step1(run, "before")
	if _, err := a.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("Commit that lost to a park: %v, want ErrConflict", err)
	}
	resumed := decide(ctx, t, b, "park-1", checkpoint.DecisionApproved)
	next, cp = step1(resumed, "after")
	cp.Gen = resumed.Resumes
	if _, err := b.Commit(ctx, next, cp); err != nil {
		t.Fatalf("Commit of the resumed step: %v", err)
	}
	mustCheckpoint(ctx, t, b, "park-1", 1, `{"by":"after"}`)
}

// A commit of the current generation that loses the run write to a mere
// record on the run (an audit entry) still settles onto the run: the
// generation rule only refuses what a decision made stale.
func TestCommitSettlesWithinGeneration(t *testing.T) {
	ctx := testCtx(t)
	a, _, run := commitRace(t, "gen-audit", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		cur, err := b.GetRun(ctx, run.ID)
		if err != nil {
			t.Error(err)
			return
		}
		cur.Audit = append(cur.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditRefused, Step: 1, By: "mallory"})
		if _, err := b.UpdateRun(ctx, cur); err != nil {
			t.Errorf("audit: %v", err)
		}
	})
	// The attempt reads the run after a decision: generation 1.
	park(ctx, t, a, run.ID)
	read := decide(ctx, t, a, run.ID, checkpoint.DecisionApproved)
	next, cp := step1(read, "gen1")
	cp.Gen = read.Resumes
	got, err := a.Commit(ctx, next, cp)
	if err != nil {
		t.Fatalf("Commit of generation 1 that lost to an audit entry: %v", err)
	}
	stored, err := a.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Rev != got.Rev || stored.Step != 2 || stored.Resumes != 1 || len(stored.Audit) != 1 {
		t.Fatalf("run after settling: step %d resumes %d audit %v rev %d (commit returned %d)", stored.Step, stored.Resumes, stored.Audit, stored.Rev, got.Rev)
	}
	mustCheckpoint(ctx, t, a, run.ID, 1, `{"by":"gen1"}`)
}

// Several attempts of the resumed step find the stale checkpoint at once:
// exactly one replaces it, the others lose with ErrCheckpointExists.
func TestCommitOverEarlierGenerationOnce(t *testing.T) {
	ctx := testCtx(t)
	a, b, run := commitRace(t, "gen-race", func(ctx context.Context, b *kvstore.Store, run checkpoint.Run) {
		park(ctx, t, b, run.ID)
		decide(ctx, t, b, run.ID, checkpoint.DecisionApproved)
	})
	next, cp := step1(run, "before")
	if _, err := a.Commit(ctx, next, cp); !errors.Is(err, checkpoint.ErrConflict) {
		t.Fatalf("Commit from before the decision: %v, want ErrConflict", err)
	}
	kvstore.SetAfterCheckpoint(a, nil)
	resumed, err := b.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s := a
			if i%2 == 1 {
				s = b
			}
			next, cp := step1(resumed, fmt.Sprint("w", i))
			cp.Gen = resumed.Resumes
			_, errs[i] = s.Commit(ctx, next, cp)
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("writers %d and %d both committed step 1", winner, i)
			}
			winner = i
		case errors.Is(err, checkpoint.ErrCheckpointExists):
		default:
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer committed: %v", errs)
	}
	mustCheckpoint(ctx, t, a, run.ID, 1, fmt.Sprintf(`{"by":"w%d"}`, winner))
}
