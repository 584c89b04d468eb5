package checkpointtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// fanOutRun creates run id and commits step 1 as a fan-out of total
// branches of step "pay", so that the run waits at the join, step 2.
func fanOutRun(t *testing.T, s checkpoint.Store, id string, total int) (checkpoint.Run, checkpoint.Checkpoint) {
	t.Helper()
	r := mustCreate(t, s, newRun(id))
	cp := newCheckpoint(id, 1, "splitter")
	cp.FanOut = &checkpoint.FanOut{}
	for i := 1; i <= total; i++ {
		cp.FanOut.Branches = append(cp.FanOut.Branches, checkpoint.Branch{Step: "pay", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	return mustCommit(t, s, advance(r, 1), cp), cp
}

// branchCheckpoint is the checkpoint of branch i of the fan-out whose join
// is step n, written by writer by.
func branchCheckpoint(id string, n, i int, by string) checkpoint.Checkpoint {
	cp := newCheckpoint(id, n, by)
	cp.Branch, cp.Next = i, ""
	cp.Name = "pay"
	cp.Effects = []checkpoint.Effect{{Key: fmt.Sprintf("%s:step%d.%d", id, n, i)}}
	return cp
}

// A fan-out's branches are read, committed first-writer-wins, counted and
// listed, without moving the run or showing among the run's steps.
func testBranchCommit(t *testing.T, s checkpoint.Store) {
	run, fan := fanOutRun(t, s, "fan-1", 3)
	snap, err := s.Load(ctx(t), "fan-1", checkpoint.AtBranch(2, 1))
	if err != nil {
		t.Fatalf("Load branch: %v", err)
	}
	if snap.Current != nil || snap.Previous == nil || len(snap.Journal) != 0 || len(snap.Failures) != 0 {
		t.Fatalf("Load branch before any commit: %+v", snap)
	}
	sameCheckpoint(t, "the fan-out read by a branch", *snap.Previous, fan)
	sameJSON(t, "run read by a branch", snap.Run, run)

	for i := 1; i <= 3; i++ {
		n, err := s.CommitBranch(ctx(t), branchCheckpoint("fan-1", 2, i, "first"))
		if err != nil || n != i {
			t.Fatalf("CommitBranch %d = %d, %v; want %d (each writer in turn is the newest)", i, n, err, i)
		}
	}
	n, err := s.CommitBranch(ctx(t), branchCheckpoint("fan-1", 2, 3, "second"))
	wantErr(t, "second commit of the newest branch", err, checkpoint.ErrCheckpointExists)
	if n != 3 {
		t.Fatalf("second commit of the newest branch counted %d, want 3: a redelivery must learn that all are in", n)
	}
	n, err = s.CommitBranch(ctx(t), branchCheckpoint("fan-1", 2, 1, "second"))
	wantErr(t, "second commit of branch 1", err, checkpoint.ErrCheckpointExists)
	if n != 3 && n != 0 {
		t.Fatalf("second commit of branch 1 counted %d, want 3 (or 0: a later writer counted)", n)
	}

	snap, err = s.Load(ctx(t), "fan-1", checkpoint.AtBranch(2, 2))
	if err != nil || snap.Current == nil {
		t.Fatalf("Load branch after commit: %+v, %v", snap.Current, err)
	}
	sameCheckpoint(t, "branch 2", *snap.Current, branchCheckpoint("fan-1", 2, 2, "first"))
	got, err := s.BranchCheckpoints(ctx(t), "fan-1", 2, 3)
	if err != nil || len(got) != 3 {
		t.Fatalf("BranchCheckpoints = %d, %v; want 3", len(got), err)
	}
	for i, cp := range got {
		sameCheckpoint(t, fmt.Sprint("branch ", i+1), cp, branchCheckpoint("fan-1", 2, i+1, "first"))
	}
	if got, err := s.BranchCheckpoints(ctx(t), "fan-1", 2, 2); err != nil || len(got) != 2 {
		t.Fatalf("BranchCheckpoints of the first 2 = %d, %v", len(got), err)
	}
	if stored := mustGet(t, s, "fan-1"); stored.Rev != run.Rev || stored.Step != 2 {
		t.Fatalf("branches moved the run: step %d rev %d, want step 2 rev %d", stored.Step, stored.Rev, run.Rev)
	}
	all, err := s.Checkpoints(ctx(t), "fan-1")
	if err != nil || len(all) != 1 || all[0].Step != 1 {
		t.Fatalf("Checkpoints lists %d (%v): the run's steps are step 1 only", len(all), err)
	}
	join, err := s.Load(ctx(t), "fan-1", checkpoint.AtStep(2))
	if err != nil || join.Current != nil || join.Previous == nil || join.Previous.FanOut == nil {
		t.Fatalf("Load of the join: %+v, %v", join, err)
	}
}

// Branches keep journals and failure counts of their own: two branches
// calling the same name, or failing, never see each other's records.
func testBranchJournalsAndFailures(t *testing.T, s checkpoint.Store) {
	fanOutRun(t, s, "fan-2", 2)
	for i := 1; i <= 2; i++ {
		rec := call("pay", fmt.Sprintf(`"paid-%d"`, i), 0)
		stored, err := s.RecordCall(ctx(t), "fan-2", checkpoint.AtBranch(2, i), rec)
		if err != nil || string(stored.Result) != string(rec.Result) {
			t.Fatalf("RecordCall branch %d = %s, %v: branches share a journal", i, stored.Result, err)
		}
	}
	if n, err := s.RecordFailure(ctx(t), "fan-2", checkpoint.AtBranch(2, 1), failure(1, "down")); err != nil || n != 1 {
		t.Fatalf("RecordFailure branch 1 = %d, %v", n, err)
	}
	if n, err := s.RecordFailure(ctx(t), "fan-2", checkpoint.AtBranch(2, 1), failure(2, "down")); err != nil || n != 2 {
		t.Fatalf("RecordFailure branch 1 again = %d, %v", n, err)
	}
	if n, err := s.RecordFailure(ctx(t), "fan-2", checkpoint.AtBranch(2, 2), failure(1, "down")); err != nil || n != 1 {
		t.Fatalf("RecordFailure branch 2 = %d, %v: branches share a failure count", n, err)
	}
	snap, err := s.Load(ctx(t), "fan-2", checkpoint.AtBranch(2, 2))
	if err != nil || len(snap.Journal) != 1 || string(snap.Journal[0].Result) != `"paid-2"` || len(snap.Failures) != 1 {
		t.Fatalf("Load branch 2: journal %+v failures %+v (%v)", snap.Journal, snap.Failures, err)
	}
	join, err := s.Load(ctx(t), "fan-2", checkpoint.AtStep(2))
	if err != nil || len(join.Journal) != 0 || len(join.Failures) != 0 {
		t.Fatalf("the join sees branch records: journal %+v failures %+v (%v)", join.Journal, join.Failures, err)
	}
	if _, err := s.CommitBranch(ctx(t), branchCheckpoint("ghost-2", 2, 1, "x")); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("CommitBranch of an unknown run: %v", err)
	}
	if _, err := s.CommitBranch(ctx(t), branchCheckpoint("fan-2", 2, 0, "x")); err == nil {
		t.Fatal("CommitBranch of branch 0 succeeded")
	}
	if _, err := s.CommitBranch(ctx(t), branchCheckpoint("fan-2", 2, checkpoint.MaxBranches+1, "x")); err == nil {
		t.Fatal("CommitBranch past MaxBranches succeeded")
	}
}

// spending is the checkpoint of branch i written by by, spending i.
func spending(id string, n, i int, by string) checkpoint.Checkpoint {
	cp := branchCheckpoint(id, n, i, by)
	cp.Spend = float64(i)
	return cp
}

// Many deliveries of a fan-out's branches commit at once, duplicates
// included: each branch has exactly one first writer, whose checkpoint is
// stored, no count exceeds the branches, at least one writer is told that
// all are in after the last first write, and the fan-out's spend counts
// each branch once.
func testBranchCommitConcurrent(t *testing.T, s checkpoint.Store) {
	const writers, total = 16, 40
	fanOutRun(t, s, "fan-3", total)
	type result struct {
		branch, count int
		err           error
	}
	results := make([][]result, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for _, i := range rand.Perm(total) {
				n, err := s.CommitBranch(ctx(t), spending("fan-3", 2, i+1, fmt.Sprint("writer-", w)))
				results[w] = append(results[w], result{i + 1, n, err})
			}
		}()
	}
	close(start)
	wg.Wait()
	winner := map[int]int{}
	toldAll := 0
	for w, rs := range results {
		for _, r := range rs {
			switch {
			case r.err == nil:
				if prev, dup := winner[r.branch]; dup {
					t.Fatalf("writers %d and %d both committed branch %d", prev, w, r.branch)
				}
				winner[r.branch] = w
			case !errors.Is(r.err, checkpoint.ErrCheckpointExists):
				t.Fatalf("writer %d branch %d: %v", w, r.branch, r.err)
			}
			if r.count < 0 || r.count > total {
				t.Fatalf("writer %d branch %d counted %d of %d", w, r.branch, r.count, total)
			}
			if r.count == total {
				toldAll++
			}
		}
	}
	if len(winner) != total {
		t.Fatalf("%d branches have a first writer, want %d", len(winner), total)
	}
	if toldAll == 0 {
		t.Fatal("no writer was told that all branches are in")
	}
	got, err := s.BranchCheckpoints(ctx(t), "fan-3", 2, total)
	if err != nil || len(got) != total {
		t.Fatalf("BranchCheckpoints = %d, %v", len(got), err)
	}
	for _, cp := range got {
		sameCheckpoint(t, fmt.Sprint("branch ", cp.Branch), cp, spending("fan-3", 2, cp.Branch, fmt.Sprint("writer-", winner[cp.Branch])))
	}
	snap, err := s.Load(ctx(t), "fan-3", checkpoint.AtBranch(2, 1))
	if want := float64(total * (total + 1) / 2); err != nil || snap.BranchSpend != want {
		t.Fatalf("BranchSpend = %v, %v; want %v: each branch's spend once", snap.BranchSpend, err, want)
	}
}

// branchFailure is the stored failure of branch i of the fan-out whose
// join is step n, under the run's redrives.
func branchFailure(id string, n, i, redrives int) checkpoint.Checkpoint {
	cp := branchCheckpoint(id, n, i, "failure")
	cp.Status, cp.Error, cp.Effects, cp.Redrives = checkpoint.StatusDead, "ledger refused", nil, redrives
	return cp
}

// A branch's outcome, result or failure, is first writer wins on its own
// key (issue 23 item 5): a failure stored first refuses a later result of
// the same redrives, is neither counted nor listed, and gives way to the
// first outcome of a later redrive; a result stored first refuses a
// failure.
func testBranchOutcome(t *testing.T, s checkpoint.Store) {
	fanOutRun(t, s, "fan-o", 3)
	if n, err := s.CommitBranch(ctx(t), branchCheckpoint("fan-o", 2, 1, "first")); err != nil || n != 1 {
		t.Fatalf("CommitBranch 1 = %d, %v", n, err)
	}
	// A result first: a failure of the branch is refused.
	_, err := s.CommitBranch(ctx(t), branchFailure("fan-o", 2, 1, 0))
	wantErr(t, "failure after a result", err, checkpoint.ErrCheckpointExists)
	if snap, err := s.Load(ctx(t), "fan-o", checkpoint.AtBranch(2, 1)); err != nil || snap.Current == nil || snap.Current.Failed() {
		t.Fatalf("branch 1 after a refused failure: %+v, %v; want its result", snap.Current, err)
	}

	// A failure first: a result of the same redrives is refused.
	if n, err := s.CommitBranch(ctx(t), branchFailure("fan-o", 2, 2, 0)); err != nil || n != 0 {
		t.Fatalf("failure of branch 2 = %d, %v; want 0, nil", n, err)
	}
	_, err = s.CommitBranch(ctx(t), branchCheckpoint("fan-o", 2, 2, "late"))
	wantErr(t, "result after a failure", err, checkpoint.ErrCheckpointExists)
	_, err = s.CommitBranch(ctx(t), branchFailure("fan-o", 2, 2, 0))
	wantErr(t, "second failure", err, checkpoint.ErrCheckpointExists)
	snap, err := s.Load(ctx(t), "fan-o", checkpoint.AtBranch(2, 2))
	if err != nil || snap.Current == nil || !snap.Current.Failed() || snap.Current.Error != "ledger refused" {
		t.Fatalf("branch 2 after a failure: %+v, %v; want the failure", snap.Current, err)
	}
	// Branch 3's result is the newest write: it counts, without branch 2.
	if n, err := s.CommitBranch(ctx(t), branchCheckpoint("fan-o", 2, 3, "first")); err != nil || n != 2 {
		t.Fatalf("CommitBranch 3 = %d, %v; want 2: a failure is not counted", n, err)
	}
	if done, err := s.BranchCheckpoints(ctx(t), "fan-o", 2, 3); err != nil || len(done) != 2 || done[0].Branch != 1 || done[1].Branch != 3 {
		t.Fatalf("BranchCheckpoints = %+v, %v; want branches 1 and 3: a failure is not listed", done, err)
	}

	// After a redrive the failure gives way to the first outcome.
	if n, err := s.CommitBranch(ctx(t), branchFailure("fan-o", 2, 2, 1)); err != nil || n != 0 {
		t.Fatalf("failure of branch 2 after a redrive = %d, %v; want it written", n, err)
	}
	late := branchCheckpoint("fan-o", 2, 2, "redriven")
	late.Redrives = 1
	_, err = s.CommitBranch(ctx(t), late)
	wantErr(t, "result after a failure of the same redrive", err, checkpoint.ErrCheckpointExists)
	late.Redrives = 2
	if n, err := s.CommitBranch(ctx(t), late); err != nil || n != 3 {
		t.Fatalf("result of branch 2 after the second redrive = %d, %v; want 3", n, err)
	}
	_, err = s.CommitBranch(ctx(t), branchFailure("fan-o", 2, 2, 3))
	wantErr(t, "failure after the result", err, checkpoint.ErrCheckpointExists)
	done, err := s.BranchCheckpoints(ctx(t), "fan-o", 2, 3)
	if err != nil || len(done) != 3 {
		t.Fatalf("BranchCheckpoints = %d, %v; want 3", len(done), err)
	}
	sameCheckpoint(t, "branch 2's result", done[1], late)
}

// What a fan-out's results spent is read with every branch (issue 23 item
// 11: the max-spend cap counts it before the join): a result counts once,
// when it is stored, whoever commits it again; a failure does not count,
// a result written over it after a redrive does; another fan-out of the
// run and the run record are left alone.
func testBranchSpend(t *testing.T, s checkpoint.Store) {
	run, _ := fanOutRun(t, s, "fan-s", 4)
	spendOf := func(i int) float64 {
		t.Helper()
		snap, err := s.Load(ctx(t), "fan-s", checkpoint.AtBranch(2, i))
		if err != nil {
			t.Fatalf("Load branch %d: %v", i, err)
		}
		return snap.BranchSpend
	}
	if got := spendOf(1); got != 0 {
		t.Fatalf("BranchSpend before any commit = %v, want 0", got)
	}
	first := branchCheckpoint("fan-s", 2, 1, "first")
	first.Spend = 0.25
	if _, err := s.CommitBranch(ctx(t), first); err != nil {
		t.Fatalf("CommitBranch 1: %v", err)
	}
	if got := spendOf(3); got != 0.25 {
		t.Fatalf("BranchSpend after branch 1 = %v, want 0.25, read by every branch", got)
	}
	again := branchCheckpoint("fan-s", 2, 1, "second")
	again.Spend = 9
	_, err := s.CommitBranch(ctx(t), again)
	wantErr(t, "second commit of branch 1", err, checkpoint.ErrCheckpointExists)
	_, err = s.CommitBranch(ctx(t), first)
	wantErr(t, "replay of branch 1", err, checkpoint.ErrCheckpointExists)
	if got := spendOf(1); got != 0.25 {
		t.Fatalf("BranchSpend after branch 1 was committed again = %v, want 0.25: only the stored result counts, once", got)
	}
	failed := branchFailure("fan-s", 2, 2, 0)
	failed.Spend = 7
	if _, err := s.CommitBranch(ctx(t), failed); err != nil {
		t.Fatalf("failure of branch 2: %v", err)
	}
	third := branchCheckpoint("fan-s", 2, 3, "first")
	third.Spend = 1.5
	if _, err := s.CommitBranch(ctx(t), third); err != nil {
		t.Fatalf("CommitBranch 3: %v", err)
	}
	if got := spendOf(2); got != 1.75 {
		t.Fatalf("BranchSpend with branch 2 failed = %v, want 1.75: a failure spends nothing", got)
	}
	redriven := branchCheckpoint("fan-s", 2, 2, "redriven")
	redriven.Spend, redriven.Redrives = 2, 1
	if _, err := s.CommitBranch(ctx(t), redriven); err != nil {
		t.Fatalf("result of branch 2 after a redrive: %v", err)
	}
	if got := spendOf(4); got != 3.75 {
		t.Fatalf("BranchSpend after branch 2's result = %v, want 3.75", got)
	}
	if join, err := s.Load(ctx(t), "fan-s", checkpoint.AtStep(2)); err != nil || join.BranchSpend != 0 {
		t.Fatalf("Load of the join: BranchSpend %v, %v; want 0: the join reads the branches themselves", join.BranchSpend, err)
	}
	if stored := mustGet(t, s, "fan-s"); stored.Rev != run.Rev || stored.Spend != run.Spend {
		t.Fatalf("branch spend moved the run: rev %d spend %v, want rev %d spend %v", stored.Rev, stored.Spend, run.Rev, run.Spend)
	}
	// A later fan-out of the run (join at step 4) sums on its own.
	if snap, err := s.Load(ctx(t), "fan-s", checkpoint.AtBranch(4, 1)); err != nil || snap.BranchSpend != 0 {
		t.Fatalf("Load branch of another fan-out: BranchSpend %v, %v; want 0", snap.BranchSpend, err)
	}
}

// A reference to no step or branch is refused before anything is read or
// written: a branch's join comes after its fan-out (step 2 at the
// earliest), and steps and branches count from 1.
func testStepRefInvalid(t *testing.T, s checkpoint.Store) {
	fanOutRun(t, s, "fan-ref", 2)
	for _, at := range []checkpoint.StepRef{checkpoint.AtBranch(1, 1), checkpoint.AtBranch(2, -1)} {
		if _, err := s.Load(ctx(t), "fan-ref", at); err == nil || errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Load %s: %v, want it refused", at, err)
		}
	}
	if _, err := s.RecordCall(ctx(t), "fan-ref", checkpoint.AtBranch(2, -1), call("pay", `1`, 0)); err == nil {
		t.Errorf("RecordCall %s: no error, want it refused", checkpoint.AtBranch(2, -1))
	}
	for _, at := range []checkpoint.StepRef{checkpoint.AtStep(0), checkpoint.AtBranch(2, -1)} {
		if _, err := s.RecordFailure(ctx(t), "fan-ref", at, failure(1, "down")); err == nil || errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("RecordFailure %s: %v, want it refused", at, err)
		}
	}
	if join, err := s.Load(ctx(t), "fan-ref", checkpoint.AtStep(2)); err != nil || len(join.Journal) != 0 || len(join.Failures) != 0 {
		t.Fatalf("the join after refused calls: journal %+v failures %+v (%v)", join.Journal, join.Failures, err)
	}
}
