// Package checkpointtest is the conformance suite every checkpoint.Store
// passes. A store's own test calls Run with a constructor that returns a
// fresh, isolated store (its own key prefix or bucket) for each subtest:
//
//	func TestConformance(t *testing.T) {
//		r := testenv.StartRedis(t)
//		client := ... // one client for the whole test
//		checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
//			return redisstore.New(client, redisstore.Options{Prefix: "t-" + t.Name()})
//		})
//	}
//
// The suite asserts concrete values, so a store that loses a field, orders
// wrongly or lets two writers win fails it. A store whose documented
// semantics differ from the strict contract says how with RunWith and
// Options; the suite then checks that semantics instead, just as strictly.
package checkpointtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Options name the documented ways a store's semantics differ from the
// strict contract of checkpoint.Store. The zero value is the strict
// contract (the Redis store keeps it).
type Options struct {
	// CheckpointFirst: Commit stores the checkpoint, then moves the run, in
	// two writes (the JetStream KV store on a one-replica file bucket, or
	// when it falls back to two writes). A commit whose run changed after
	// the caller read it may still store its checkpoint, which is then the
	// step's result (it was the first writer) if the run is still running
	// at that step in the checkpoint's generation (Resumes == Gen): Commit
	// moves the run onto it and succeeds, keeping what the other writer
	// recorded. If the run went elsewhere (cancelled), or a decision
	// resumed it since (another generation), Commit returns ErrConflict,
	// the run record is left as it is and the checkpoint stays; one of an
	// earlier generation is never offered as the step's result, and the
	// resumed step's commit replaces it. A commit to a missing run returns
	// ErrNotFound and may leave its checkpoint too. A strict store writes
	// nothing on ErrConflict or ErrNotFound.
	CheckpointFirst bool
}

// Run runs every conformance subtest against stores made by newStore,
// holding them to the strict contract (RunWith with zero Options).
func Run(t *testing.T, newStore func(t *testing.T) checkpoint.Store) {
	t.Helper()
	RunWith(t, Options{}, newStore)
}

// RunWith runs every conformance subtest against stores made by newStore,
// with the semantics opts name. Subtests run in parallel, so newStore must
// be safe to call concurrently and each store it returns must not see the
// others' data.
func RunWith(t *testing.T, opts Options, newStore func(t *testing.T) checkpoint.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s checkpoint.Store)
	}{
		{"CreateGetRoundTrip", testCreateGetRoundTrip},
		{"CreateSetsTimes", testCreateSetsTimes},
		{"CreateDuplicate", testCreateDuplicate},
		{"GetUnknown", testGetUnknown},
		{"RunIDCharset", testRunIDCharset},
		{"ListRunsOrderAndFilters", testListRuns},
		{"ListRunsTransitions", testListRunsTransitions},
		{"PageRunsNewestFirst", testPageRunsNewestFirst},
		{"PageRunsStatusTime", testPageRunsStatusTime},
		{"PageRunsCreatedInStatus", testPageRunsCreatedInStatus},
		{"PageRunsPaging", testPageRunsPaging},
		{"PageRunsTies", testPageRunsTies},
		{"PageRunsAcrossTime", testPageRunsAcrossTime},
		{"PageRunsLimit", testPageRunsLimit},
		{"PageRunsInvalid", testPageRunsInvalid},
		{"CountRuns", testCountRuns},
		{"UpdateRunCAS", testUpdateRunCAS},
		{"Load", testLoad},
		{"CommitHappyPath", testCommitHappyPath},
		{"CommitStaleRev", func(t *testing.T, s checkpoint.Store) { testCommitStaleRev(t, s, opts) }},
		{"CommitAfterCancel", func(t *testing.T, s checkpoint.Store) { testCommitAfterCancel(t, s, opts) }},
		{"CommitAcrossDecision", func(t *testing.T, s checkpoint.Store) { testCommitAcrossDecision(t, s, opts) }},
		{"CommitExistingStep", testCommitExistingStep},
		{"CommitUnknownRun", func(t *testing.T, s checkpoint.Store) { testCommitUnknownRun(t, s, opts) }},
		{"CommitConcurrent", testCommitConcurrent},
		{"CommitRacesCancel", func(t *testing.T, s checkpoint.Store) { testCommitRacesCancel(t, s, opts) }},
		{"CheckpointsInOrder", testCheckpointsInOrder},
		{"RecordCallFirstWriterWins", testRecordCallFirstWriterWins},
		{"RecordCallConcurrentSameName", testRecordCallConcurrentSameName},
		{"RecordCallConcurrentNames", testRecordCallConcurrentNames},
		{"RecordFailureCounts", testRecordFailureCounts},
		{"RecordFailureConcurrent", testRecordFailureConcurrent},
		{"RecordFailureTruncates", testRecordFailureTruncates},
		{"RecordFailureKeepsLast", testRecordFailureKeepsLast},
		{"RecordFailureUnknownRun", testRecordFailureUnknownRun},
		{"BranchCommit", testBranchCommit},
		{"BranchJournalsAndFailures", testBranchJournalsAndFailures},
		{"BranchCommitConcurrent", testBranchCommitConcurrent},
		{"BranchOutcome", testBranchOutcome},
		{"BranchSpend", testBranchSpend},
		{"StepRefInvalid", testStepRefInvalid},
		{"Workflows", testWorkflows},
		{"WorkflowsWhileReregistered", testWorkflowsWhileReregistered},
		{"DueClaimOnce", testDueClaimOnce},
		{"DueReindex", testDueReindex},
		{"DueUnindex", testDueUnindex},
		{"DueFinish", testDueFinish},
		{"DueLimitAndOrder", testDueLimitAndOrder},
		{"DueLapsedLeaseOrder", testDueLapsedLeaseOrder},
		{"DueConcurrentClaimers", testDueConcurrentClaimers},
		{"DueFinishRightAfterClaim", testDueFinishRightAfterClaim},
		{"DueInvalid", testDueInvalid},
		{"Liveness", testLiveness},
		{"RecordBound", testRecordBound},
		{"LegacyRecordSpills", testLegacyRecordSpills},
		{"Retention", testRetention},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// ctx bounds each subtest so a hung store fails instead of stalling the run.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// base is a fixed, UTC, sub-second instant: stores must keep nanoseconds.
var base = time.Date(2025, 3, 14, 9, 26, 53, 589793238, time.UTC)

// newRun is a fully populated run at step 1, so a dropped field shows.
func newRun(id string) checkpoint.Run {
	return checkpoint.Run{
		ID:        id,
		Workflow:  "claim",
		Version:   3,
		Status:    checkpoint.StatusRunning,
		Step:      1,
		StepName:  "intake",
		Input:     json.RawMessage(`{"amount":1840,"claimant":{"name":"Ada","tags":["a","b"]}}`),
		StartedBy: "cli:alice",
		CreatedAt: base,
		UpdatedAt: base.Add(time.Millisecond),
		Wait: &checkpoint.Wait{
			Step:          5,
			StepName:      "approve",
			Payload:       json.RawMessage(`{"amount":1840}`),
			PayloadSHA256: "abc123",
			Group:         "adjusters",
			Since:         base.Add(time.Second),
			Deadline:      base.Add(72 * time.Hour),
			OnExpiry:      "escalate",
			EscalateTo:    "supervisors",
			Reminders:     2,
		},
		Approvals: []checkpoint.Approval{{
			Step:          5,
			By:            "bob",
			At:            base.Add(2 * time.Second),
			Decision:      checkpoint.DecisionApproved,
			Channel:       "http",
			PayloadSHA256: "abc123",
			Payload:       json.RawMessage(`{"amount":1840}`),
			Reason:        "looks right",
		}},
		Error:   "",
		Resumes: 1,
		Audit: []checkpoint.AuditEntry{{
			Kind:          checkpoint.AuditParked,
			Step:          5,
			At:            base.Add(time.Second),
			Group:         "adjusters",
			PayloadSHA256: "abc123",
		}, {
			Kind:          checkpoint.AuditDecision,
			Step:          5,
			At:            base.Add(2 * time.Second),
			By:            "bob",
			Channel:       "http",
			Group:         "adjusters",
			Decision:      checkpoint.DecisionApproved,
			PayloadSHA256: "abc123",
			Reason:        "looks right",
		}},
		Steps: 4,
	}
}

// newCheckpoint is checkpoint n of run id with state {"step":n,"by":by}.
func newCheckpoint(id string, n int, by string) checkpoint.Checkpoint {
	return checkpoint.Checkpoint{
		RunID:  id,
		Step:   n,
		Name:   fmt.Sprintf("step-%d", n),
		State:  json.RawMessage(fmt.Sprintf(`{"step":%d,"by":%q}`, n, by)),
		Next:   fmt.Sprintf("step-%d", n+1),
		Status: checkpoint.StatusRunning,
		Journal: []checkpoint.CallRecord{{
			Name: "model", ArgsSHA256: "h1", Result: json.RawMessage(`"ok"`), At: base,
		}},
		Effects:    []checkpoint.Effect{{Key: fmt.Sprintf("%s:step%d", id, n), Replayed: false}},
		Gen:        1, // newRun's resume generation
		Attempt:    2,
		At:         base.Add(time.Duration(n) * time.Minute),
		DurationMS: 12.5,
	}
}

// advance is what a worker stores with checkpoint n: the cursor at n+1.
func advance(r checkpoint.Run, n int) checkpoint.Run {
	r.Step = n + 1
	r.StepName = fmt.Sprintf("step-%d", n+1)
	r.UpdatedAt = base.Add(time.Duration(n) * time.Minute)
	return r
}

func mustCreate(t *testing.T, s checkpoint.Store, r checkpoint.Run) checkpoint.Run {
	t.Helper()
	got, err := s.CreateRun(ctx(t), r)
	if err != nil {
		t.Fatalf("CreateRun(%s): %v", r.ID, err)
	}
	if got.Rev == 0 {
		t.Fatalf("CreateRun(%s) returned Rev 0", r.ID)
	}
	return got
}

func mustGet(t *testing.T, s checkpoint.Store, id string) checkpoint.Run {
	t.Helper()
	got, err := s.GetRun(ctx(t), id)
	if err != nil {
		t.Fatalf("GetRun(%s): %v", id, err)
	}
	return got
}

func mustCommit(t *testing.T, s checkpoint.Store, r checkpoint.Run, cp checkpoint.Checkpoint) checkpoint.Run {
	t.Helper()
	got, err := s.Commit(ctx(t), r, cp)
	if err != nil {
		t.Fatalf("Commit(%s:%d): %v", r.ID, cp.Step, err)
	}
	return got
}

func wantErr(t *testing.T, op string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", op, err, target)
	}
}

// canon renders v as indented JSON with raw JSON fields re-indented and
// times in UTC, so semantically equal values print identically and a diff
// is readable. Rev is not part of the JSON and is compared separately.
func canon(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(utcTimes(v))
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("indent: %v", err)
	}
	return out.String()
}

// utcTimes returns a copy of v with every time.Time converted to UTC, so a
// store may hand back times in any location as long as they are Equal.
func utcTimes(v any) any {
	rv := reflect.ValueOf(v)
	cp := reflect.New(rv.Type()).Elem()
	cp.Set(rv)
	walkTimes(cp)
	return cp.Interface()
}

var timeType = reflect.TypeOf(time.Time{})

func walkTimes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == timeType {
			if v.CanSet() {
				v.Set(reflect.ValueOf(v.Interface().(time.Time).UTC()))
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				walkTimes(v.Field(i))
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			n := reflect.New(v.Type().Elem())
			n.Elem().Set(v.Elem())
			walkTimes(n.Elem())
			v.Set(n)
		}
	case reflect.Slice:
		if !v.IsNil() && v.Type().Elem().Kind() != reflect.Uint8 {
			n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			reflect.Copy(n, v)
			for i := 0; i < n.Len(); i++ {
				walkTimes(n.Index(i))
			}
			v.Set(n)
		}
	}
}

func sameRun(t *testing.T, what string, got, want checkpoint.Run) {
	t.Helper()
	if g, w := canon(t, got), canon(t, want); g != w {
		t.Fatalf("%s: run differs\ngot:  %s\nwant: %s", what, g, w)
	}
}

func sameCheckpoint(t *testing.T, what string, got, want checkpoint.Checkpoint) {
	t.Helper()
	if g, w := canon(t, got), canon(t, want); g != w {
		t.Fatalf("%s: checkpoint differs\ngot:  %s\nwant: %s", what, g, w)
	}
}

func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	if g, w := canon(t, got), canon(t, want); g != w {
		t.Fatalf("%s differs\ngot:  %s\nwant: %s", what, g, w)
	}
}
