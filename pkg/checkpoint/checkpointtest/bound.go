package checkpointtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// bigPayload is a distinct approval payload of about 4 KB.
func bigPayload(i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"call":%d,"args":%q}`, i, strings.Repeat(string(rune('a'+i%26)), 4000)))
}

// testRecordBound grows one run as its writers do, a decision with a
// 4 KB payload and ten audit entries by UpdateRun, then a commit of the
// step, 300 times: every write is taken, the stored record stays under
// checkpoint.MaxRunRecordBytes, and the store's History gives back every
// entry and payload (checkpoint.Restore).
func testRecordBound(t *testing.T, s checkpoint.Store) {
	const steps = 300
	run := mustCreate(t, s, checkpoint.Run{ID: "bound", Workflow: "agent", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "call", CreatedAt: base, UpdatedAt: base})
	var want checkpoint.Run
	for i := 1; i <= steps; i++ {
		p := bigPayload(i)
		a := checkpoint.Approval{Step: i, By: "bob", At: base, Decision: checkpoint.DecisionApproved, Channel: "api", PayloadSHA256: checkpoint.SHA256Hex(p), Payload: p}
		if i%50 == 0 {
			a.Reason = strings.Repeat("because ", 200)
		}
		next := run
		next.Approvals = append(append([]checkpoint.Approval(nil), run.Approvals...), a)
		next.Audit = append([]checkpoint.AuditEntry(nil), run.Audit...)
		for k := 0; k < 10; k++ {
			next.Audit = append(next.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditSignal, Step: i, At: base, Reason: fmt.Sprintf("signal %d.%d", i, k)})
		}
		want.Approvals = append(want.Approvals, a)
		want.Audit = append(want.Audit, next.Audit[len(next.Audit)-10:]...)
		stored, err := s.UpdateRun(ctx(t), next)
		if err != nil {
			t.Fatalf("UpdateRun with decision %d: %v", i, err)
		}
		next = stored
		next.Step, next.Steps = i+1, i
		if run, err = s.Commit(ctx(t), next, checkpoint.Checkpoint{Step: i, Name: "call", State: json.RawMessage(`{}`), Next: "call", Status: checkpoint.StatusRunning, Attempt: 1, At: base}); err != nil {
			t.Fatalf("Commit of step %d: %v", i, err)
		}
	}
	got := mustGet(t, s, run.ID)
	doc, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("record after %d decisions of 4 KB and %d audit entries: %d bytes", steps, len(want.Audit), len(doc))
	if len(doc) > checkpoint.MaxRunRecordBytes {
		t.Fatalf("stored record is %d bytes, over checkpoint.MaxRunRecordBytes (%d)", len(doc), checkpoint.MaxRunRecordBytes)
	}
	if got.Step != steps+1 || got.Steps != steps {
		t.Fatalf("run at step %d after %d steps, want %d after %d", got.Step, got.Steps, steps+1, steps)
	}
	sameHistory(t, s, got, want)
}

// testLegacyRecordSpills: a record as the code before the bound stored it
// (every audit entry and payload inline; CreateRun stores a record as
// given) loads whole, and its next write spills it.
func testLegacyRecordSpills(t *testing.T, s checkpoint.Store) {
	old := checkpoint.Run{ID: "legacy", Workflow: "agent", Version: 1, Status: checkpoint.StatusRunning, Step: 101, StepName: "call", CreatedAt: base, UpdatedAt: base}
	for i := 1; i <= 100; i++ {
		p := bigPayload(i)
		old.Approvals = append(old.Approvals, checkpoint.Approval{Step: i, By: "bob", At: base, Decision: checkpoint.DecisionApproved, Channel: "api", PayloadSHA256: checkpoint.SHA256Hex(p), Payload: p})
	}
	for i := 0; i < 2000; i++ {
		old.Audit = append(old.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditParked, Step: i/20 + 1, At: base, Group: "g"})
	}
	mustCreate(t, s, old)
	got := mustGet(t, s, old.ID)
	if len(got.Audit) != 2000 || len(got.Approvals) != 100 || string(got.Approvals[99].Payload) != string(old.Approvals[99].Payload) {
		t.Fatalf("legacy record loads with %d audit entries and %d decisions", len(got.Audit), len(got.Approvals))
	}
	next := got
	next.Audit = append(append([]checkpoint.AuditEntry(nil), got.Audit...), checkpoint.AuditEntry{Kind: checkpoint.AuditSignal, Step: 101, At: base})
	if _, err := s.UpdateRun(ctx(t), next); err != nil {
		t.Fatalf("UpdateRun of the legacy record: %v", err)
	}
	stored := mustGet(t, s, old.ID)
	doc, _ := json.Marshal(stored)
	if len(doc) > checkpoint.MaxRunRecordBytes || len(stored.Audit) != checkpoint.AuditKept || stored.AuditArchived != 2001-checkpoint.AuditKept {
		t.Fatalf("after one write the legacy record is %d bytes, %d audit entries on it, %d archived", len(doc), len(stored.Audit), stored.AuditArchived)
	}
	old.Audit = next.Audit
	sameHistory(t, s, stored, old)
}

// sameHistory checks that the store's History restores got's whole audit
// trail and every decision with its payload and reason as in want.
func sameHistory(t *testing.T, s checkpoint.Store, got, want checkpoint.Run) {
	t.Helper()
	h, ok := s.(checkpoint.History)
	if !ok {
		t.Fatalf("%T does not implement checkpoint.History", s)
	}
	full, err := checkpoint.Restore(ctx(t), h, got)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if len(full.Audit) != len(want.Audit) || len(full.Approvals) != len(want.Approvals) {
		t.Fatalf("restored %d audit entries and %d decisions, want %d and %d", len(full.Audit), len(full.Approvals), len(want.Audit), len(want.Approvals))
	}
	for i := range want.Audit {
		if g, w := canon(t, full.Audit[i]), canon(t, want.Audit[i]); g != w {
			t.Fatalf("audit entry %d differs\ngot:  %s\nwant: %s", i, g, w)
		}
	}
	for i := range want.Approvals {
		if g, w := canon(t, full.Approvals[i]), canon(t, want.Approvals[i]); g != w {
			t.Fatalf("decision %d differs\ngot:  %.300s\nwant: %.300s", i, g, w)
		}
	}
}
