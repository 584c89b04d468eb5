package checkpointtest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

func testLoad(t *testing.T, s checkpoint.Store) {
	r := mustCreate(t, s, newRun("load-1"))

	snap, err := s.Load(ctx(t), "load-1", checkpoint.AtStep(1))
	if err != nil {
		t.Fatalf("Load step 1: %v", err)
	}
	sameRun(t, "Load(1).Run", snap.Run, r)
	if snap.Run.Rev != r.Rev {
		t.Fatalf("Load Rev = %d, want %d", snap.Run.Rev, r.Rev)
	}
	if snap.Current != nil || snap.Previous != nil || len(snap.Journal) != 0 || len(snap.Failures) != 0 {
		t.Fatalf("Load(1) on a new run = current %+v previous %+v journal %+v failures %+v, want all empty",
			snap.Current, snap.Previous, snap.Journal, snap.Failures)
	}

	cp1 := newCheckpoint("load-1", 1, "w1")
	r = mustCommit(t, s, advance(r, 1), cp1)
	call := checkpoint.CallRecord{Name: "llm", ArgsSHA256: "x", Result: []byte(`{"a":1}`), At: base}
	if _, err := s.RecordCall(ctx(t), "load-1", checkpoint.AtStep(2), call); err != nil {
		t.Fatalf("RecordCall: %v", err)
	}

	snap, err = s.Load(ctx(t), "load-1", checkpoint.AtStep(2))
	if err != nil {
		t.Fatalf("Load step 2: %v", err)
	}
	if snap.Run.Rev != r.Rev || snap.Run.Step != 2 {
		t.Fatalf("Load(2).Run = step %d rev %d, want step 2 rev %d", snap.Run.Step, snap.Run.Rev, r.Rev)
	}
	if snap.Current != nil {
		t.Fatalf("Load(2).Current = %+v before step 2 committed", snap.Current)
	}
	if snap.Previous == nil {
		t.Fatal("Load(2).Previous is nil, want checkpoint 1")
	}
	sameCheckpoint(t, "Load(2).Previous", *snap.Previous, cp1)
	sameJSON(t, "Load(2).Journal", snap.Journal, []checkpoint.CallRecord{call})

	cp2 := newCheckpoint("load-1", 2, "w2")
	r = mustCommit(t, s, advance(r, 2), cp2)
	snap, err = s.Load(ctx(t), "load-1", checkpoint.AtStep(2))
	if err != nil {
		t.Fatalf("Load step 2 after commit: %v", err)
	}
	if snap.Current == nil || snap.Previous == nil {
		t.Fatalf("Load(2) after commit: current %v previous %v, want both", snap.Current, snap.Previous)
	}
	sameCheckpoint(t, "Load(2).Current", *snap.Current, cp2)
	sameCheckpoint(t, "Load(2).Previous", *snap.Previous, cp1)
	if snap.Run.Rev != r.Rev || snap.Run.Step != 3 {
		t.Fatalf("Load(2).Run = step %d rev %d, want step 3 rev %d", snap.Run.Step, snap.Run.Rev, r.Rev)
	}

	// The journal belongs to its step only.
	snap, err = s.Load(ctx(t), "load-1", checkpoint.AtStep(3))
	if err != nil {
		t.Fatalf("Load step 3: %v", err)
	}
	if len(snap.Journal) != 0 || snap.Current != nil || snap.Previous == nil || snap.Previous.Step != 2 {
		t.Fatalf("Load(3) = current %v previous %+v journal %+v, want previous 2 and nothing else",
			snap.Current, snap.Previous, snap.Journal)
	}
}

func testCommitHappyPath(t *testing.T, s checkpoint.Store) {
	r := mustCreate(t, s, newRun("commit-1"))
	next := advance(r, 1)
	cp := newCheckpoint("commit-1", 1, "w")

	got, err := s.Commit(ctx(t), next, cp)
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got.Rev == 0 || got.Rev == r.Rev {
		t.Fatalf("Commit Rev = %d, want a new revision (was %d)", got.Rev, r.Rev)
	}
	sameRun(t, "Commit result", got, next)

	stored := mustGet(t, s, "commit-1")
	sameRun(t, "run after Commit", stored, next)
	if stored.Rev != got.Rev {
		t.Fatalf("GetRun Rev = %d, Commit returned %d", stored.Rev, got.Rev)
	}

	c, err := s.Checkpoint(ctx(t), "commit-1", 1)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	sameCheckpoint(t, "Checkpoint(1)", c, cp)
	all, err := s.Checkpoints(ctx(t), "commit-1")
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	if len(all) != 1 {
		t.Fatalf("Checkpoints = %d entries, want 1", len(all))
	}
	sameCheckpoint(t, "Checkpoints[0]", all[0], cp)

	// The returned run is good for the next commit without a re-read.
	got2, err := s.Commit(ctx(t), advance(got, 2), newCheckpoint("commit-1", 2, "w"))
	if err != nil {
		t.Fatalf("Commit step 2 with the returned run: %v", err)
	}
	if got2.Rev == got.Rev {
		t.Fatalf("second Commit kept Rev %d", got2.Rev)
	}
}

func testCommitStaleRev(t *testing.T, s checkpoint.Store, opts Options) {
	r := mustCreate(t, s, newRun("stale-1"))
	moved := r
	moved.Audit = append(moved.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditRefused, Step: 1, At: base, By: "mallory"})
	moved, err := s.UpdateRun(ctx(t), moved)
	if err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}

	late := newCheckpoint("stale-1", 1, "late")
	got, err := s.Commit(ctx(t), advance(r, 1), late)
	if opts.CheckpointFirst {
		// The run still waits for step 1 in the same generation: the
		// checkpoint is stored and the run moves onto it, keeping what the
		// other writer recorded.
		if err != nil {
			t.Fatalf("Commit with a stale Rev, run still at the step: %v", err)
		}
		want := advance(moved, 1)
		sameRun(t, "Commit result", got, want)
		stored := mustGet(t, s, "stale-1")
		sameRun(t, "run after a stale Commit", stored, want)
		if stored.Rev != got.Rev || got.Rev == moved.Rev {
			t.Fatalf("Rev = %d after a stale Commit that returned %d (was %d)", stored.Rev, got.Rev, moved.Rev)
		}
		c, err := s.Checkpoint(ctx(t), "stale-1", 1)
		if err != nil {
			t.Fatalf("Checkpoint after a stale Commit: %v", err)
		}
		sameCheckpoint(t, "checkpoint after a stale Commit", c, late)
	} else {
		wantErr(t, "Commit with a stale Rev", err, checkpoint.ErrConflict)
		_, err = s.Checkpoint(ctx(t), "stale-1", 1)
		wantErr(t, "Checkpoint after a refused Commit", err, checkpoint.ErrNotFound)
		all, err := s.Checkpoints(ctx(t), "stale-1")
		if err != nil || len(all) != 0 {
			t.Fatalf("Checkpoints after a refused Commit = %v, %v; want none", all, err)
		}
		stored := mustGet(t, s, "stale-1")
		sameRun(t, "run after a refused Commit", stored, moved)
		if stored.Rev != moved.Rev {
			t.Fatalf("Rev = %d after a refused Commit, want %d", stored.Rev, moved.Rev)
		}
	}
}

// A run that went elsewhere (cancelled) is never moved by a late commit.
func testCommitAfterCancel(t *testing.T, s checkpoint.Store, opts Options) {
	r := mustCreate(t, s, newRun("stale-2"))
	cancelled := r
	cancelled.Status = checkpoint.StatusCancelled
	cancelled, err := s.UpdateRun(ctx(t), cancelled)
	if err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}
	late := newCheckpoint("stale-2", 1, "late")
	_, err = s.Commit(ctx(t), advance(r, 1), late)
	wantErr(t, "Commit after a cancel", err, checkpoint.ErrConflict)
	stored := mustGet(t, s, "stale-2")
	sameRun(t, "run after a Commit that lost to a cancel", stored, cancelled)
	if stored.Rev != cancelled.Rev {
		t.Fatalf("Rev = %d after a refused Commit, want %d", stored.Rev, cancelled.Rev)
	}
	c, err := s.Checkpoint(ctx(t), "stale-2", 1)
	if opts.CheckpointFirst {
		if err != nil {
			t.Fatalf("Checkpoint after a Commit that lost to a cancel: %v (the checkpoint stays)", err)
		}
		sameCheckpoint(t, "checkpoint after a Commit that lost to a cancel", c, late)
	} else {
		wantErr(t, "Checkpoint after a refused Commit", err, checkpoint.ErrNotFound)
	}
}

// A decision resumed the run at step 1 (a new generation: Resumes one
// more) after an attempt of the step read it. That attempt's result is
// never step 1's, whatever the store: its commit is refused and the run
// stays as the decision left it (a rejection must not be walked past).
// The resumed step's commit is step 1's result, and a late commit of the
// earlier generation never replaces it.
func testCommitAcrossDecision(t *testing.T, s checkpoint.Store, opts Options) {
	const id = "decided-1"
	r := mustCreate(t, s, newRun(id))
	decided := r
	decided.Resumes = r.Resumes + 1
	decided.Approvals = append(append([]checkpoint.Approval(nil), r.Approvals...), checkpoint.Approval{
		Step: 1, By: "carol", At: base, Decision: checkpoint.DecisionRejected, Channel: "http", PayloadSHA256: "abc123",
	})
	decided, err := s.UpdateRun(ctx(t), decided)
	if err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}

	stale := newCheckpoint(id, 1, "before-decision")
	_, err = s.Commit(ctx(t), advance(r, 1), stale)
	wantErr(t, "Commit of an attempt from before the decision", err, checkpoint.ErrConflict)
	stored := mustGet(t, s, id)
	sameRun(t, "run after a Commit from before the decision", stored, decided)
	if stored.Rev != decided.Rev {
		t.Fatalf("Rev = %d after a refused Commit, want %d", stored.Rev, decided.Rev)
	}
	c, err := s.Checkpoint(ctx(t), id, 1)
	if opts.CheckpointFirst && err == nil {
		sameCheckpoint(t, "checkpoint left by a Commit from before the decision", c, stale)
	} else {
		wantErr(t, "Checkpoint after a refused Commit", err, checkpoint.ErrNotFound)
	}
	snap, err := s.Load(ctx(t), id, checkpoint.AtStep(1))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if snap.Current != nil && snap.Current.Gen == snap.Run.Resumes {
		t.Fatalf("Load(1) offers a checkpoint of generation %d, the run's: a result from before the decision would be adopted", snap.Current.Gen)
	}

	// The resumed step commits: its result is step 1's.
	resumed := newCheckpoint(id, 1, "after-decision")
	resumed.Gen = decided.Resumes
	got := mustCommit(t, s, advance(decided, 1), resumed)
	sameRun(t, "Commit of the resumed step", got, advance(decided, 1))
	c, err = s.Checkpoint(ctx(t), id, 1)
	if err != nil {
		t.Fatalf("Checkpoint after the resumed step's Commit: %v", err)
	}
	sameCheckpoint(t, "checkpoint of the resumed step", c, resumed)

	// A late attempt of the earlier generation never replaces it.
	_, err = s.Commit(ctx(t), advance(r, 1), newCheckpoint(id, 1, "zombie"))
	wantErr(t, "Commit of an earlier generation over a later one", err, checkpoint.ErrCheckpointExists)
	all, err := s.Checkpoints(ctx(t), id)
	if err != nil || len(all) != 1 {
		t.Fatalf("Checkpoints = %v, %v; want the resumed step's only", all, err)
	}
	sameCheckpoint(t, "Checkpoints[0]", all[0], resumed)
	sameRun(t, "run at the end", mustGet(t, s, id), got)
}

func testCommitExistingStep(t *testing.T, s checkpoint.Store) {
	created := mustCreate(t, s, newRun("exists-1"))
	first := newCheckpoint("exists-1", 1, "first")
	r := mustCommit(t, s, advance(created, 1), first)

	// Even with the current Rev, a committed step is never overwritten.
	second := newCheckpoint("exists-1", 1, "second")
	again := advance(r, 1)
	again.StepName = "should-not-be-stored"
	_, err := s.Commit(ctx(t), again, second)
	wantErr(t, "Commit of a committed step", err, checkpoint.ErrCheckpointExists)

	c, err := s.Checkpoint(ctx(t), "exists-1", 1)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	sameCheckpoint(t, "checkpoint after a second Commit", c, first)
	stored := mustGet(t, s, "exists-1")
	sameRun(t, "run after a second Commit", stored, r)
	if stored.Rev != r.Rev {
		t.Fatalf("Rev = %d after a refused Commit, want %d", stored.Rev, r.Rev)
	}

	// With a stale Rev as well, the checkpoint answer still wins: the
	// caller must learn the step is done, not merely that the run moved.
	_, err = s.Commit(ctx(t), advance(created, 1), newCheckpoint("exists-1", 1, "third"))
	wantErr(t, "Commit of a committed step", err, checkpoint.ErrCheckpointExists)
}

func testCommitUnknownRun(t *testing.T, s checkpoint.Store, opts Options) {
	r := newRun("ghost-1")
	r.Rev = 1
	cp := newCheckpoint("ghost-1", 1, "w")
	_, err := s.Commit(ctx(t), advance(r, 1), cp)
	wantErr(t, "Commit to an unknown run", err, checkpoint.ErrNotFound)
	c, err := s.Checkpoint(ctx(t), "ghost-1", 1)
	if opts.CheckpointFirst && err == nil {
		// Stored before the run write found no run, and never removed.
		sameCheckpoint(t, "checkpoint left by a Commit to an unknown run", c, cp)
	} else {
		wantErr(t, "Checkpoint of an unknown run", err, checkpoint.ErrNotFound)
	}
	_, err = s.GetRun(ctx(t), "ghost-1")
	wantErr(t, "GetRun after Commit to an unknown run", err, checkpoint.ErrNotFound)
}

// Several deliveries of one step finish at once: exactly one commit wins
// and everyone can read the winner's result.
func testCommitConcurrent(t *testing.T, s checkpoint.Store) {
	const writers = 16
	r := mustCreate(t, s, newRun("race-1"))
	next := advance(r, 1)

	var wg sync.WaitGroup
	results := make([]checkpoint.Run, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = s.Commit(ctx(t), next, newCheckpoint("race-1", 1, fmt.Sprint("writer-", i)))
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
		case errors.Is(err, checkpoint.ErrCheckpointExists), errors.Is(err, checkpoint.ErrConflict):
		default:
			t.Fatalf("writer %d: unexpected error %v", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer committed step 1: %v", errs)
	}

	c, err := s.Checkpoint(ctx(t), "race-1", 1)
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	sameCheckpoint(t, "stored checkpoint", c, newCheckpoint("race-1", 1, fmt.Sprint("writer-", winner)))
	stored := mustGet(t, s, "race-1")
	if stored.Rev != results[winner].Rev || stored.Step != 2 {
		t.Fatalf("run = step %d rev %d, want step 2 and the winner's rev %d", stored.Step, stored.Rev, results[winner].Rev)
	}
}

// A cancel and a commit read the same revision; exactly one may move the
// run. A strict store never ends with a checkpoint whose run did not
// advance; a CheckpointFirst store may, and then it is the commit's own.
func testCommitRacesCancel(t *testing.T, s checkpoint.Store, opts Options) {
	var commits, cancels int
	defer func() { t.Logf("commit won %d times, cancel won %d times", commits, cancels) }()
	for i := range 50 {
		id := fmt.Sprintf("cancel-race-%d", i)
		r := mustCreate(t, s, newRun(id))

		cancelled := r
		cancelled.Status = checkpoint.StatusCancelled
		var commitErr, cancelErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, commitErr = s.Commit(ctx(t), advance(r, 1), newCheckpoint(id, 1, "worker"))
		}()
		go func() {
			defer wg.Done()
			<-start
			_, cancelErr = s.UpdateRun(ctx(t), cancelled)
		}()
		close(start)
		wg.Wait()

		stored := mustGet(t, s, id)
		cp, cpErr := s.Checkpoint(ctx(t), id, 1)
		switch {
		case commitErr == nil && cancelErr == nil:
			t.Fatalf("%s: both the commit and the cancel succeeded on rev %d", id, r.Rev)
		case commitErr == nil:
			wantErr(t, id+": cancel after commit", cancelErr, checkpoint.ErrConflict)
			if cpErr != nil || stored.Status != checkpoint.StatusRunning || stored.Step != 2 {
				t.Fatalf("%s: commit won but run is %s at step %d, checkpoint err %v", id, stored.Status, stored.Step, cpErr)
			}
			commits++
		case cancelErr == nil:
			wantErr(t, id+": commit after cancel", commitErr, checkpoint.ErrConflict)
			if opts.CheckpointFirst && cpErr == nil {
				sameCheckpoint(t, id+": checkpoint left by a commit that lost to a cancel", cp, newCheckpoint(id, 1, "worker"))
			} else {
				wantErr(t, id+": checkpoint after cancel won", cpErr, checkpoint.ErrNotFound)
			}
			if stored.Status != checkpoint.StatusCancelled || stored.Step != 1 {
				t.Fatalf("%s: cancel won but run is %s at step %d", id, stored.Status, stored.Step)
			}
			cancels++
		default:
			t.Fatalf("%s: neither landed: commit %v, cancel %v", id, commitErr, cancelErr)
		}
	}
}

func testCheckpointsInOrder(t *testing.T, s checkpoint.Store) {
	r := mustCreate(t, s, newRun("many-1"))
	all, err := s.Checkpoints(ctx(t), "many-1")
	if err != nil || len(all) != 0 {
		t.Fatalf("Checkpoints of a new run = %v, %v; want none", all, err)
	}
	const steps = 12 // past 9, so a store sorting "10" before "2" fails
	var want []checkpoint.Checkpoint
	for n := 1; n <= steps; n++ {
		cp := newCheckpoint("many-1", n, "w")
		r = mustCommit(t, s, advance(r, n), cp)
		want = append(want, cp)
	}
	all, err = s.Checkpoints(ctx(t), "many-1")
	if err != nil {
		t.Fatalf("Checkpoints: %v", err)
	}
	sameJSON(t, "Checkpoints", all, want)
	_, err = s.Checkpoint(ctx(t), "many-1", steps+1)
	wantErr(t, "Checkpoint past the last step", err, checkpoint.ErrNotFound)
	c, err := s.Checkpoint(ctx(t), "many-1", 10)
	if err != nil {
		t.Fatalf("Checkpoint(10): %v", err)
	}
	sameCheckpoint(t, "Checkpoint(10)", c, want[9])
}
