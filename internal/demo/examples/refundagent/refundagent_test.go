package refundagent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/examples/refundagent"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

func setup(t *testing.T, kind string) (*testfleet.Fleet, payments.Client) {
	t.Helper()
	pay, err := payments.Open(filepath.Join(t.TempDir(), "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pay.Close() })
	srv := httptest.NewServer(http.StripPrefix("/payments", pay.Handler()))
	t.Cleanup(srv.Close)
	pc := payments.Client{BaseURL: srv.URL + "/payments"}
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("OPENAI_API_KEY", "")
	f := testfleet.New(t, kind)
	wf := refundagent.New(refundagent.Config{PaymentsURL: pc.BaseURL})
	f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Blobs = blob.NewMemory("DURABLE_BLOBS") })
	return f, pc
}

// The scripted agent looks the order up, asks to refund 149 EUR, waits
// for a supervisor, and pays once; the reconciler finds the log and the
// payments API in agreement.
func TestRefundAgentApproved(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f, pc := setup(t, kind)
			ctx := context.Background()
			f.Start(refundagent.Name, "refund-1", `{"order_id": "A-1001", "message": "My blender arrived broken."}`)
			run := f.WaitStatus("refund-1", checkpoint.StatusWaiting, 30*time.Second)
			var p agent.ToolCallApproval
			if err := json.Unmarshal(run.Wait.Payload, &p); err != nil || p.Tool != "refund" || p.Key != "refund-1:step4" || run.Wait.Group != refundagent.ApprovalGroup {
				t.Fatalf("parked with %s for %s (%v)", run.Wait.Payload, run.Wait.Group, err)
			}
			if ps, _ := pc.List(ctx); len(ps) != 0 {
				t.Fatalf("paid before approval: %+v", ps)
			}
			if _, err := f.Client.Decide(ctx, client.Decision{RunID: "refund-1", By: "sam", Channel: "cli", PayloadSHA256: run.Wait.PayloadSHA256}); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("refund-1", checkpoint.StatusCompleted, 30*time.Second)
			ps, err := pc.List(ctx)
			if err != nil || len(ps) != 1 || ps[0].Key != "refund-1:step4" || ps[0].Amount != 149 || ps[0].Requests != 1 {
				t.Fatalf("payments %+v (%v), want one of 149 under refund-1:step4", ps, err)
			}
			cps := f.Checkpoints("refund-1")
			var names []string
			for _, cp := range cps {
				names = append(names, cp.Name)
			}
			if strings.Join(names, ",") != "model,tool,model,tool,model" {
				t.Fatalf("steps %v", names)
			}
			var st agent.State
			if err := json.Unmarshal(cps[4].State, &st); err != nil || !strings.Contains(st.Answer, "refunded 149 EUR") || st.Usage.ModelCalls != 3 || st.Usage.Tokens() != 612+58+803+91+951+47 {
				t.Fatalf("final state %+v (%v)", st, err)
			}
			if len(cps[3].Effects) != 1 || cps[3].Effects[0].Key != "refund-1:step4" {
				t.Fatalf("refund step effects %+v", cps[3].Effects)
			}

			log, err := agent.ToolLog(cps)
			if err != nil || len(log) != 2 {
				t.Fatalf("tool log %+v (%v)", log, err)
			}
			mm, err := agent.Reconcile(ctx, "refund-1", log, refundagent.Reconciler{Pay: pc})
			if err != nil || len(mm) != 0 {
				t.Fatalf("reconcile: %+v (%v)", mm, err)
			}
		})
	}
}

// A rejected refund is not paid; the model hears it and tells the customer.
func TestRefundAgentRejected(t *testing.T) {
	f, pc := setup(t, "redis")
	ctx := context.Background()
	f.Start(refundagent.Name, "refund-2", "")
	run := f.WaitStatus("refund-2", checkpoint.StatusWaiting, 30*time.Second)
	if _, err := f.Client.Decide(ctx, client.Decision{RunID: "refund-2", By: "sam", Reject: true, Reason: "photos missing", Channel: "cli", PayloadSHA256: run.Wait.PayloadSHA256}); err != nil {
		t.Fatal(err)
	}
	f.WaitStatus("refund-2", checkpoint.StatusCompleted, 30*time.Second)
	if ps, _ := pc.List(ctx); len(ps) != 0 {
		t.Fatalf("paid after a rejection: %+v", ps)
	}
	cps := f.Checkpoints("refund-2")
	var st agent.State
	if err := json.Unmarshal(cps[len(cps)-1].State, &st); err != nil || !strings.Contains(st.Answer, "was not approved") {
		t.Fatalf("answer %q (%v)", st.Answer, err)
	}
}

// The reconciler reports a payment the log never recorded and a logged
// refund the payments API does not hold.
func TestReconcilerFindsMismatches(t *testing.T) {
	_, pc := setup(t, "redis")
	ctx := context.Background()
	if _, _, err := pc.Pay(ctx, "refund-9:step4", payments.PayRequest{RunID: "refund-9", Claim: "A-1002", Amount: 59, Currency: "EUR", Payee: "cust-9"}); err != nil {
		t.Fatal(err)
	}
	log := []agent.LogEntry{{Run: "refund-9", Step: 6, Tool: "refund", Key: "refund-9:step6", Content: `{"payment_id":"pay_000042","order_id":"A-1002","amount":59,"currency":"EUR"}`}}
	mm, err := agent.Reconcile(ctx, "refund-9", log, refundagent.Reconciler{Pay: pc})
	if err != nil {
		t.Fatal(err)
	}
	if len(mm) != 2 || mm[0].Kind != "differs" || mm[0].Key != "refund-9:step6" || mm[1].Kind != "unlogged" || mm[1].Key != "refund-9:step4" {
		t.Fatalf("mismatches %+v", mm)
	}
}
