package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
)

// gatedCall is the 4 KB payload of gated call n: each call's differs.
func gatedCall(n int) map[string]any {
	return map[string]any{"call": n, "args": strings.Repeat(string(rune('a'+n%26)), 4000)}
}

// An agent with many gated calls (issue 23 item 6): one run parks for
// 150 approvals, each with a 4 KB payload of its own, is reminded 8
// times before each decision (1,500 audit entries in all: park, 8
// reminders, decision), and completes; the stored record stays under
// checkpoint.MaxRunRecordBytes, and client.Inspect shows every audit
// entry and every decision with its payload. 150 calls are past every
// bound the record has: 600 KB of payloads against its 320 KiB, 15 times
// checkpoint.AuditKept audit entries, 7 times checkpoint.ApprovalsKept
// decisions. DURABLE_BOUND_CALLS=1000 runs the issue's own figure (about
// 2 minutes under -race).
func TestRunRecordBound(t *testing.T) {
	calls, reminders := 150, 8
	if n, err := strconv.Atoi(os.Getenv("DURABLE_BOUND_CALLS")); err == nil && n > 0 {
		calls = n
	}
	if testing.Short() {
		calls = 50
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // minutes under -race: the two stores side by side
			wf := steps.New[counter]("gated", 1)
			call := wf.Ref("call")
			wf.
				Step("call", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
					req := steps.ApprovalRequest{Payload: gatedCall(st.N), Group: "ops", TTL: time.Hour, OnExpiry: steps.ExpireRemind, Reminders: reminders}
					a, err := s.ApprovalOf(req)
					switch {
					case err != nil:
						return steps.Outcome[counter]{}, err
					case a == nil:
						return steps.Park[counter](req), nil
					}
					if st.N++; st.N == calls {
						return steps.Complete(st), nil
					}
					return steps.Next(call, st), nil
				})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
			ctx := context.Background()
			began := time.Now()
			f.Start("gated", "agent-1", "")
			var rev uint64
			clock := time.Now()
			for n := 0; n < calls; n++ {
				run := waitParkedAgain(t, f, "agent-1", rev)
				if run.Wait == nil || run.Wait.Step != n+1 {
					t.Fatalf("call %d: run parked at %+v, want step %d", n, run.Wait, n+1)
				}
				for r := 0; r < reminders; r++ {
					clock = clock.Add(2 * time.Hour)
					res, err := f.Client.Expire(ctx, "agent-1", clock)
					if err != nil || res.Action != client.ExpireReminded {
						t.Fatalf("call %d, reminder %d: %+v %v", n, r, res, err)
					}
				}
				decided, err := f.Client.Decide(ctx, client.Decision{RunID: "agent-1", By: "bob", Channel: client.ChannelCLI, PayloadSHA256: run.Wait.PayloadSHA256, Step: n + 1})
				if err != nil {
					t.Fatalf("decide call %d: %v", n, err)
				}
				rev = decided.Rev
			}
			f.WaitStatus("agent-1", checkpoint.StatusCompleted, 60*time.Second)
			took := time.Since(began)
			doc, err := json.Marshal(f.Get("agent-1"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d calls of 4 KB, %d audit entries in %v; stored record %d bytes (bound %d)", kind, calls, calls*(reminders+2), took.Round(time.Millisecond), len(doc), checkpoint.MaxRunRecordBytes)
			if len(doc) > checkpoint.MaxRunRecordBytes {
				t.Fatalf("stored record is %d bytes, over checkpoint.MaxRunRecordBytes (%d)", len(doc), checkpoint.MaxRunRecordBytes)
			}
			v, err := f.Client.Inspect(ctx, "agent-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Audit) != calls*(reminders+2) || len(v.Approvals) != calls {
				t.Fatalf("Inspect shows %d audit entries and %d decisions, want %d and %d", len(v.Audit), len(v.Approvals), calls*(reminders+2), calls)
			}
			for n, a := range v.Approvals {
				want, _ := json.Marshal(gatedCall(n))
				if a.Step != n+1 || string(a.Payload) != string(want) || a.PayloadSHA256 != checkpoint.SHA256Hex(want) {
					t.Fatalf("decision %d: step %d, %d-byte payload %.60s, want step %d and call %d's", n, a.Step, len(a.Payload), a.Payload, n+1, n)
				}
			}
			for i, e := range v.Audit {
				wantKind := checkpoint.AuditReminded
				switch i % (reminders + 2) {
				case 0:
					wantKind = checkpoint.AuditParked
				case reminders + 1:
					wantKind = checkpoint.AuditDecision
				}
				if e.Kind != wantKind || e.Step != i/(reminders+2)+1 {
					t.Fatalf("audit entry %d: %s at step %d, want %s at step %d", i, e.Kind, e.Step, wantKind, i/(reminders+2)+1)
				}
			}
		})
	}
}
