package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// Refused approvals stay bounded on a run however long its audit trail:
// the 50 refusals it keeps count though newer entries pushed them off
// the run record into its audit log (issue 23 item 6).
func TestRefusalsBoundedPastTheRecord(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ctx := context.Background()
			run, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: "refused-1", Workflow: "w", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "s"})
			if err != nil {
				t.Fatal(err)
			}
			refuse := func() {
				t.Helper()
				if err := f.Client.RecordRefusal(ctx, run.ID, checkpoint.AuditEntry{Step: 1, By: "mallory", Reason: "stale hash"}); err != nil {
					t.Fatal(err)
				}
			}
			for range 50 {
				refuse()
			}
			for i := range checkpoint.AuditKept {
				r := f.Get(run.ID)
				r.Audit = append(append([]checkpoint.AuditEntry(nil), r.Audit...), checkpoint.AuditEntry{Kind: checkpoint.AuditSignal, Step: 1, At: time.Now(), Reason: "signal " + string(rune('a'+i%26))})
				if _, err := f.Store.UpdateRun(ctx, r); err != nil {
					t.Fatal(err)
				}
			}
			before := f.Get(run.ID)
			for range 10 {
				refuse()
			}
			after := f.Get(run.ID)
			if n, m := before.AuditArchived+len(before.Audit), after.AuditArchived+len(after.Audit); m != n {
				t.Fatalf("the run recorded %d more refusals past the 50 it keeps", m-n)
			}
		})
	}
}
