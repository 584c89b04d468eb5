package checkpointtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

func testCreateGetRoundTrip(t *testing.T, s checkpoint.Store) {
	want := newRun("claim-0042")
	created := mustCreate(t, s, want)
	sameRun(t, "CreateRun result", created, want)

	got := mustGet(t, s, want.ID)
	sameRun(t, "GetRun", got, want)
	if got.Rev != created.Rev {
		t.Fatalf("GetRun Rev = %d, CreateRun returned %d", got.Rev, created.Rev)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.Wait.Deadline.Equal(want.Wait.Deadline) ||
		!got.Approvals[0].At.Equal(want.Approvals[0].At) {
		t.Fatalf("times changed: created %v deadline %v approval %v", got.CreatedAt, got.Wait.Deadline, got.Approvals[0].At)
	}
	// The audit trail and the step count are plain JSON of the run
	// document; sameRun compares them too, this says which one went.
	if got.Steps != 4 || len(got.Audit) != 2 || got.Audit[1].Decision != checkpoint.DecisionApproved ||
		got.Audit[1].By != "bob" || !got.Audit[1].At.Equal(want.Audit[1].At) {
		t.Fatalf("GetRun Steps = %d, Audit = %+v; want 4 steps and the two entries stored", got.Steps, got.Audit)
	}
}

// A caller that leaves the times zero gets them set, so ListRuns can order
// by creation.
func testCreateSetsTimes(t *testing.T, s checkpoint.Store) {
	r := newRun("no-times")
	r.CreatedAt, r.UpdatedAt = time.Time{}, time.Time{}
	before := time.Now().Add(-time.Second)
	created := mustCreate(t, s, r)
	got := mustGet(t, s, r.ID)
	for what, v := range map[string]time.Time{
		"CreateRun CreatedAt": created.CreatedAt, "GetRun CreatedAt": got.CreatedAt,
		"GetRun UpdatedAt": got.UpdatedAt,
	} {
		if v.Before(before) || v.After(time.Now().Add(time.Second)) {
			t.Errorf("%s = %v, want about now", what, v)
		}
	}
	if !got.CreatedAt.Equal(created.CreatedAt) {
		t.Errorf("GetRun CreatedAt %v != CreateRun's %v", got.CreatedAt, created.CreatedAt)
	}
}

func testCreateDuplicate(t *testing.T, s checkpoint.Store) {
	first := newRun("dup-1")
	created := mustCreate(t, s, first)

	second := newRun("dup-1")
	second.Workflow = "other"
	second.Status = checkpoint.StatusWaiting
	second.Step = 7
	got, err := s.CreateRun(ctx(t), second)
	wantErr(t, "second CreateRun", err, checkpoint.ErrRunExists)
	sameRun(t, "CreateRun duplicate returns the existing run", got, first)
	if got.Rev != created.Rev {
		t.Fatalf("duplicate CreateRun Rev = %d, want the existing %d", got.Rev, created.Rev)
	}

	stored := mustGet(t, s, "dup-1")
	sameRun(t, "run after duplicate CreateRun", stored, first)
	if stored.Rev != created.Rev {
		t.Fatalf("Rev moved from %d to %d on a refused CreateRun", created.Rev, stored.Rev)
	}
}

func testGetUnknown(t *testing.T, s checkpoint.Store) {
	_, err := s.GetRun(ctx(t), "nope-1")
	wantErr(t, "GetRun unknown", err, checkpoint.ErrNotFound)
	_, err = s.Checkpoint(ctx(t), "nope-1", 1)
	wantErr(t, "Checkpoint unknown run", err, checkpoint.ErrNotFound)
	_, err = s.Load(ctx(t), "nope-1", checkpoint.AtStep(1))
	wantErr(t, "Load unknown run", err, checkpoint.ErrNotFound)
	_, err = s.Checkpoints(ctx(t), "nope-1")
	wantErr(t, "Checkpoints unknown run", err, checkpoint.ErrNotFound)
}

func testRunIDCharset(t *testing.T, s checkpoint.Store) {
	for _, id := range []string{"claim-0042", "a_b-9", "X_1-2-3", "0", "RUN_with-MIXED_case-000123"} {
		r := mustCreate(t, s, newRun(id))
		r = mustCommit(t, s, advance(r, 1), newCheckpoint(id, 1, "w"))
		snap, err := s.Load(ctx(t), id, checkpoint.AtStep(2))
		if err != nil {
			t.Fatalf("Load(%s): %v", id, err)
		}
		if snap.Run.ID != id || snap.Run.Rev != r.Rev || snap.Previous == nil || snap.Previous.RunID != id {
			t.Fatalf("Load(%s) = run %q rev %d previous %+v; want run %q rev %d and checkpoint 1",
				id, snap.Run.ID, snap.Run.Rev, snap.Previous, id, r.Rev)
		}
	}
}

func testListRuns(t *testing.T, s checkpoint.Store) {
	mk := func(id, wf string, st checkpoint.Status, offset time.Duration) {
		r := newRun(id)
		r.Workflow, r.Status, r.CreatedAt = wf, st, base.Add(offset)
		mustCreate(t, s, r)
	}
	// Created out of order: the store orders by CreatedAt, not insertion.
	mk("r3", "claim", checkpoint.StatusRunning, 3*time.Second)
	mk("r1", "claim", checkpoint.StatusWaiting, 1*time.Second)
	mk("r4", "refund", checkpoint.StatusRunning, 4*time.Second)
	mk("r2", "refund", checkpoint.StatusCompleted, 2*time.Second)
	mk("r0", "claim", checkpoint.StatusRunning, 0)

	ids := func(f checkpoint.Filter) string {
		t.Helper()
		runs, err := s.ListRuns(ctx(t), f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		out := ""
		for _, r := range runs {
			if r.Rev == 0 {
				t.Fatalf("ListRuns returned %s without Rev", r.ID)
			}
			out += r.ID + " "
		}
		return out
	}
	for _, tc := range []struct {
		f    checkpoint.Filter
		want string
	}{
		{checkpoint.Filter{}, "r0 r1 r2 r3 r4 "},
		{checkpoint.Filter{Status: checkpoint.StatusRunning}, "r0 r3 r4 "},
		{checkpoint.Filter{Workflow: "refund"}, "r2 r4 "},
		{checkpoint.Filter{Workflow: "claim", Status: checkpoint.StatusRunning}, "r0 r3 "},
		{checkpoint.Filter{Status: checkpoint.StatusDead}, ""},
		{checkpoint.Filter{Workflow: "nope"}, ""},
	} {
		if got := ids(tc.f); got != tc.want {
			t.Errorf("ListRuns(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}

	// The filter sees the current status, not the one at creation.
	r := mustGet(t, s, "r1")
	r.Status = checkpoint.StatusCancelled
	if _, err := s.UpdateRun(ctx(t), r); err != nil {
		t.Fatal(err)
	}
	if got := ids(checkpoint.Filter{Status: checkpoint.StatusCancelled}); got != "r1 " {
		t.Errorf("ListRuns(cancelled) after update = %q, want %q", got, "r1 ")
	}
	if got := ids(checkpoint.Filter{Status: checkpoint.StatusWaiting}); got != "" {
		t.Errorf("ListRuns(waiting) after update = %q, want none", got)
	}
}

func testUpdateRunCAS(t *testing.T, s checkpoint.Store) {
	r := mustCreate(t, s, newRun("upd-1"))

	changed := r
	changed.Status = checkpoint.StatusWaiting
	changed.Resumes = 4
	changed.Approvals = append(changed.Approvals, checkpoint.Approval{
		Step: 5, By: "carol", At: base.Add(time.Hour), Decision: checkpoint.DecisionRejected,
		Channel: "cli", PayloadSHA256: "def",
	})
	updated, err := s.UpdateRun(ctx(t), changed)
	if err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}
	if updated.Rev == r.Rev || updated.Rev == 0 {
		t.Fatalf("UpdateRun Rev = %d, want a new revision (was %d)", updated.Rev, r.Rev)
	}
	got := mustGet(t, s, "upd-1")
	sameRun(t, "run after UpdateRun", got, changed)
	if got.Rev != updated.Rev {
		t.Fatalf("GetRun Rev = %d, UpdateRun returned %d", got.Rev, updated.Rev)
	}

	stale := r // still carries the old Rev
	stale.Status = checkpoint.StatusCancelled
	_, err = s.UpdateRun(ctx(t), stale)
	wantErr(t, "UpdateRun with stale Rev", err, checkpoint.ErrConflict)
	after := mustGet(t, s, "upd-1")
	sameRun(t, "run after refused UpdateRun", after, changed)
	if after.Rev != updated.Rev {
		t.Fatalf("Rev moved to %d on a refused UpdateRun (want %d)", after.Rev, updated.Rev)
	}

	// Two updates in a row, each from the previous result.
	again := updated
	again.Status = checkpoint.StatusRunning
	again2, err := s.UpdateRun(ctx(t), again)
	if err != nil {
		t.Fatalf("second UpdateRun: %v", err)
	}
	if again2.Rev == updated.Rev {
		t.Fatalf("second UpdateRun kept Rev %d", again2.Rev)
	}

	unknown := newRun("upd-unknown")
	unknown.Rev = 1
	_, err = s.UpdateRun(ctx(t), unknown)
	wantErr(t, "UpdateRun unknown run", err, checkpoint.ErrNotFound)
}

func testWorkflows(t *testing.T, s checkpoint.Store) {
	list, err := s.Workflows(ctx(t))
	if err != nil {
		t.Fatalf("Workflows on an empty store: %v", err)
	}
	if len(list) != 0 {
		t.Fatalf("Workflows on an empty store = %+v", list)
	}
	reg := func(name string, version int, first string, steps ...string) {
		t.Helper()
		err := s.RegisterWorkflow(ctx(t), checkpoint.WorkflowInfo{
			Name: name, Version: version, FirstStep: first, Steps: steps, UpdatedAt: base,
		})
		if err != nil {
			t.Fatalf("RegisterWorkflow(%s@%d): %v", name, version, err)
		}
	}
	reg("claim", 1, "intake", "intake", "assess")
	reg("claim", 2, "intake", "intake", "assess", "pay")
	reg("refund_v-2", 1, "start", "start")
	reg("claim", 1, "triage", "triage", "intake", "assess") // replaces claim@1

	list, err = s.Workflows(ctx(t))
	if err != nil {
		t.Fatalf("Workflows: %v", err)
	}
	got := map[string]checkpoint.WorkflowInfo{}
	for _, w := range list {
		key := fmt.Sprintf("%s@%d", w.Name, w.Version)
		if _, dup := got[key]; dup {
			t.Fatalf("Workflows lists %s twice: %+v", key, list)
		}
		got[key] = w
	}
	want := map[string]checkpoint.WorkflowInfo{
		"claim@1":      {Name: "claim", Version: 1, FirstStep: "triage", Steps: []string{"triage", "intake", "assess"}, UpdatedAt: base},
		"claim@2":      {Name: "claim", Version: 2, FirstStep: "intake", Steps: []string{"intake", "assess", "pay"}, UpdatedAt: base},
		"refund_v-2@1": {Name: "refund_v-2", Version: 1, FirstStep: "start", Steps: []string{"start"}, UpdatedAt: base},
	}
	sameJSON(t, "Workflows", got, want)
}

// testWorkflowsWhileReregistered: workers re-register their workflows
// every time they start, and a run start lists the workflows meanwhile.
// A listing taken while a registration replaces another must still show
// every workflow (a fleet of two workers once refused a start with
// "unknown workflow" this way).
func testWorkflowsWhileReregistered(t *testing.T, s checkpoint.Store) {
	names := []string{"agent-loop", "claim", "claims-batch", "fanout", "refund-agent", "shipment"}
	register := func() error {
		for _, n := range names {
			if err := s.RegisterWorkflow(ctx(t), checkpoint.WorkflowInfo{Name: n, Version: 1, FirstStep: "start", Steps: []string{"start"}}); err != nil {
				return fmt.Errorf("RegisterWorkflow(%s): %w", n, err)
			}
		}
		return nil
	}
	if err := register(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := register(); err != nil {
				done <- err
				return
			}
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for i := range 300 {
		list, err := s.Workflows(ctx(t))
		if err != nil {
			t.Fatalf("Workflows (listing %d): %v", i, err)
		}
		have := map[string]bool{}
		for _, w := range list {
			have[w.Name] = true
		}
		for _, n := range names {
			if !have[n] {
				t.Fatalf("listing %d, taken while the workflows were registered again, misses %q: %+v", i, n, list)
			}
		}
	}
}
