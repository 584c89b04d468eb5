package checkpoint_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// mapHistory is a History over what Spill returned.
type mapHistory struct {
	audit     map[int]checkpoint.AuditEntry
	approvals map[int]checkpoint.Approval
	blobs     map[string][]byte
}

func newMapHistory() *mapHistory {
	return &mapHistory{audit: map[int]checkpoint.AuditEntry{}, approvals: map[int]checkpoint.Approval{}, blobs: map[string][]byte{}}
}

func (h *mapHistory) keep(sp checkpoint.Spilled) {
	for i, e := range sp.Audit {
		h.audit[sp.AuditFrom+i] = e
	}
	for i, a := range sp.Approvals {
		h.approvals[sp.ApprovalsFrom+i] = a
	}
	for k, v := range sp.Blobs {
		h.blobs[k] = v
	}
}

func (h *mapHistory) AuditLog(context.Context, string) ([]checkpoint.AuditEntry, error) {
	out := make([]checkpoint.AuditEntry, len(h.audit))
	for i, e := range h.audit {
		out[i] = e
	}
	return out, nil
}

func (h *mapHistory) ApprovalLog(context.Context, string) ([]checkpoint.Approval, error) {
	out := make([]checkpoint.Approval, len(h.approvals))
	for i, a := range h.approvals {
		out[i] = a
	}
	return out, nil
}

func (h *mapHistory) Blob(_ context.Context, _, sha string) ([]byte, error) {
	b, ok := h.blobs[sha]
	if !ok {
		return nil, checkpoint.ErrNotFound
	}
	return b, nil
}

func payload(i, size int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", size)))
}

// TestSpill grows a run as its writers do, one decision and its audit
// entries per write, spilling each time: the record stays under
// MaxRunRecordBytes and Restore gives back every entry and payload.
func TestSpill(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := checkpoint.Run{ID: "r", Status: checkpoint.StatusRunning, Step: 1}
	var want checkpoint.Run
	h := newMapHistory()
	for i := 1; i <= 1000; i++ {
		a := checkpoint.Approval{Step: i, By: "bob", At: at, Decision: checkpoint.DecisionApproved, Payload: payload(i, 4096)}
		a.PayloadSHA256 = checkpoint.SHA256Hex(a.Payload)
		if i%100 == 0 {
			a.Reason = strings.Repeat("long reason ", 100)
		}
		want.Approvals = append(want.Approvals, a)
		prev := run
		run.Approvals = append(append([]checkpoint.Approval(nil), run.Approvals...), a)
		for k := 0; k < 10; k++ {
			e := checkpoint.AuditEntry{Kind: checkpoint.AuditSignal, Step: i, At: at, Reason: fmt.Sprint(i, k)}
			want.Audit = append(want.Audit, e)
			run.Audit = append(append([]checkpoint.AuditEntry(nil), run.Audit...), e)
		}
		run.Step = i
		before, _ := json.Marshal(prev)
		h.keep(run.Spill())
		if after, _ := json.Marshal(prev); string(after) != string(before) {
			t.Fatalf("write %d: Spill wrote into the record it was read from", i)
		}
		if again := run.Spill(); !again.Empty() {
			t.Fatalf("write %d: a second Spill moved %d entries", i, len(again.Audit)+len(again.Approvals))
		}
	}
	doc, _ := json.Marshal(run)
	t.Logf("record after 1,000 decisions of 4 KB and 10,000 audit entries: %d bytes (bound %d)", len(doc), checkpoint.MaxRunRecordBytes)
	if len(doc) > checkpoint.MaxRunRecordBytes {
		t.Fatalf("record is %d bytes, over MaxRunRecordBytes %d", len(doc), checkpoint.MaxRunRecordBytes)
	}
	if len(run.Audit) != checkpoint.AuditKept || run.AuditArchived != 10000-checkpoint.AuditKept {
		t.Fatalf("audit on record %d, archived %d", len(run.Audit), run.AuditArchived)
	}
	for _, a := range run.Approvals {
		if a.Step < run.Step && (len(a.Payload) != 0 || a.PayloadBlob == "") {
			t.Fatalf("approval of step %d keeps its %d-byte payload inline", a.Step, len(a.Payload))
		}
	}
	full, err := checkpoint.Restore(context.Background(), h, run)
	if err != nil {
		t.Fatal(err)
	}
	if got, w := mustJSON(t, full.Audit), mustJSON(t, want.Audit); got != w {
		t.Fatalf("restored audit differs: %d entries, want %d", len(full.Audit), len(want.Audit))
	}
	if got, w := mustJSON(t, full.Approvals), mustJSON(t, want.Approvals); got != w {
		t.Fatalf("restored approvals differ: %d, want %d", len(full.Approvals), len(want.Approvals))
	}
}

// TestSpillKeepsTheCursorsDecisions: decisions on the step at the cursor
// stay on the record however many there are (the step reads them all).
func TestSpillKeepsTheCursorsDecisions(t *testing.T) {
	run := checkpoint.Run{ID: "r", Step: 3}
	for i := 0; i < 50; i++ {
		run.Approvals = append(run.Approvals, checkpoint.Approval{Step: 2, By: "old"})
	}
	for i := 0; i < 50; i++ {
		run.Approvals = append(run.Approvals, checkpoint.Approval{Step: 3, By: "now"})
	}
	sp := run.Spill()
	if len(sp.Approvals) != 50 || run.ApprovalsArchived != 50 || len(run.Approvals) != 50 || run.Approvals[0].By != "now" {
		t.Fatalf("moved %d, archived %d, kept %d", len(sp.Approvals), run.ApprovalsArchived, len(run.Approvals))
	}
}

// TestSpillKeepsTheCursorsDecisionsWhole: a decision on the step at the
// cursor keeps its long reason and large payload inline, since the step
// reads them when it runs again (a rejection's reason, the payload
// approved); an earlier step's go to blobs (found by a review: a 600-byte
// reason reached the step empty).
func TestSpillKeepsTheCursorsDecisionsWhole(t *testing.T) {
	long := strings.Repeat("r", checkpoint.InlineBytes+100)
	payload := json.RawMessage(`"` + strings.Repeat("p", checkpoint.InlineBytes+100) + `"`)
	run := checkpoint.Run{ID: "r", Step: 3, Approvals: []checkpoint.Approval{
		{Step: 2, By: "old", Reason: long, Payload: payload},
		{Step: 3, By: "now", Reason: long, Payload: payload},
	}}
	sp := run.Spill()
	if a := run.Approvals[1]; a.Reason != long || string(a.Payload) != string(payload) || a.ReasonBlob != "" || a.PayloadBlob != "" {
		t.Fatalf("the cursor's decision after the spill: reason %d bytes (blob %q), payload %d bytes (blob %q); want both inline",
			len(a.Reason), a.ReasonBlob, len(a.Payload), a.PayloadBlob)
	}
	if a := run.Approvals[0]; a.Reason != "" || a.ReasonBlob == "" || len(sp.Blobs) == 0 {
		t.Fatalf("an earlier step's decision kept %d bytes of reason inline, want it in a blob", len(a.Reason))
	}
}

// TestSpillLegacyRecord: a record as the code before the bound wrote it
// (every entry inline, no archive counters) decodes, and its first spill
// moves all but the newest entries, from sequence 0.
func TestSpillLegacyRecord(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"run_id":"old","workflow":"w","version":1,"status":"running","step":5,"step_name":"s","created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:00:00Z","approvals":[`)
	for i := 1; i <= 4; i++ {
		if i > 1 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"step":%d,"by":"bob","at":"2025-01-01T00:00:00Z","decision":"approved","channel":"api","payload_sha256":"x","payload":%s}`, i, payload(i, 2000))
	}
	b.WriteString(`],"audit":[`)
	for i := 0; i < 300; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"kind":"parked","step":%d,"at":"2025-01-01T00:00:00Z"}`, i)
	}
	b.WriteString(`]}`)
	var run checkpoint.Run
	if err := json.Unmarshal([]byte(b.String()), &run); err != nil {
		t.Fatal(err)
	}
	sp := run.Spill()
	if sp.AuditFrom != 0 || len(sp.Audit) != 200 || sp.Audit[0].Step != 0 || run.Audit[0].Step != 200 || len(sp.Blobs) != 4 {
		t.Fatalf("spilled audit from %d, %d entries, %d blobs", sp.AuditFrom, len(sp.Audit), len(sp.Blobs))
	}
	if len(run.Approvals) != 4 || run.Approvals[0].PayloadBlob == "" || run.Approvals[0].PayloadSHA256 != "x" {
		t.Fatalf("approvals %+v", run.Approvals[0])
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSpillWorstCase fills every field the bound counts to its largest
// (ids, names, groups and identities of 128 bytes, reasons just under
// InlineBytes, MaxConsumedSignals consumed and 100 pending signals without
// their data, an error of 2 KiB) and checks the spilled record's size
// against MaxRunRecordBytes.
func TestSpillWorstCase(t *testing.T) {
	long := strings.Repeat("n", 128)
	reason := strings.Repeat("r", checkpoint.InlineBytes)
	sha := strings.Repeat("f", 64)
	at := time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC)
	run := checkpoint.Run{ID: long, Workflow: long, Version: 1 << 30, Status: checkpoint.StatusWaiting, Step: 1 << 30, StepName: long,
		StartedBy: long, Trace: strings.Repeat("t", 55), CreatedAt: at, UpdatedAt: at, Error: strings.Repeat("e", 2048),
		Parent: &checkpoint.ParentRef{RunID: long, Step: 1 << 30}, Resumes: 1 << 30, Redrives: 1 << 30, Spend: 1e300, Steps: 1 << 30,
		Wait: &checkpoint.Wait{Kind: checkpoint.WaitApproval, Step: 1 << 30, StepName: long, PayloadSHA256: sha, Group: long, Since: at, Deadline: at, Name: long, OnExpiry: "escalate", EscalateTo: long, Reminders: 1 << 30}}
	for i := 0; i < 1000; i++ {
		run.Audit = append(run.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditEscalated, Step: 1 << 30, At: at, By: long, Channel: long, Group: long, Decision: checkpoint.DecisionRejected, PayloadSHA256: sha, Reason: reason})
		run.Approvals = append(run.Approvals, checkpoint.Approval{Step: i, By: long, At: at, Decision: checkpoint.DecisionRejected, Channel: long, PayloadSHA256: sha, Payload: json.RawMessage(`"` + reason[:checkpoint.InlineBytes-2] + `"`), Reason: reason})
	}
	for i := 0; i < checkpoint.MaxConsumedSignals; i++ {
		run.Consumed = append(run.Consumed, checkpoint.ConsumedSignal{ID: long, Name: long[:64], At: at, Step: 1 << 30, DataSHA256: sha})
	}
	for i := 0; i < 100; i++ {
		run.Signals = append(run.Signals, checkpoint.Signal{Name: long[:64], ID: long, By: long, Channel: long, At: at})
	}
	run.Spill()
	doc, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worst-case record: %d bytes (bound %d)", len(doc), checkpoint.MaxRunRecordBytes)
	if len(doc) > checkpoint.MaxRunRecordBytes {
		t.Fatalf("worst-case record is %d bytes, over MaxRunRecordBytes %d", len(doc), checkpoint.MaxRunRecordBytes)
	}
}
