package claim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/claims"
	"github.com/durable-run/durable/internal/demo/examples/claim"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
)

// Issue 3, acceptance 3: the claim changes while it waits (the amount is
// edited in the claims system the step re-reads). The old approval does
// not pay; the run parks again with the new payload, and only an approval
// of that payload pays, the new amount, once.
func TestClaimEditedWhileWaiting(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			pay, err := payments.Open(filepath.Join(dir, "payments.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer pay.Close()
			cls, err := claims.Open(filepath.Join(dir, "claims.json"))
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("/payments/", http.StripPrefix("/payments", pay.Handler()))
			mux.Handle("/claims/", http.StripPrefix("/claims", cls.Handler()))
			srv := httptest.NewServer(mux)
			defer srv.Close()

			f := testfleet.New(t, kind)
			wf := claim.New(claim.Config{PaymentsURL: srv.URL + "/payments", ClaimsURL: srv.URL + "/claims"})
			f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
			ctx := context.Background()
			f.Start("claim", "claim-0100", "")
			first := f.WaitStatus("claim-0100", checkpoint.StatusWaiting, 20*time.Second)

			// The adjuster looked at 1840; meanwhile the claim is raised.
			if _, err := (claims.Client{BaseURL: srv.URL + "/claims"}).Set(ctx, "claim-0100", 2500); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Client.Decide(ctx, client.Decision{RunID: "claim-0100", By: "ana", Channel: client.ChannelCLI, PayloadSHA256: first.Wait.PayloadSHA256}); err != nil {
				t.Fatal(err)
			}
			var again checkpoint.Run
			testenv.Eventually(t, 20*time.Second, "parked again with the new payload", func() bool {
				r, err := f.Store.GetRun(ctx, "claim-0100")
				again = r
				return err == nil && r.Status == checkpoint.StatusWaiting && r.Wait != nil && r.Wait.PayloadSHA256 != first.Wait.PayloadSHA256
			})
			if got := string(again.Wait.Payload); !strings.Contains(got, `"amount":2500`) {
				t.Errorf("new payload %s", got)
			}
			last := again.Audit[len(again.Audit)-1]
			if last.Kind != checkpoint.AuditReparked || last.PayloadSHA256 != again.Wait.PayloadSHA256 {
				t.Errorf("audit %+v", again.Audit)
			}
			list, err := payments.Client{BaseURL: srv.URL + "/payments"}.List(ctx)
			if err != nil || len(list) != 0 {
				t.Fatalf("paid on the stale approval: %+v (%v)", list, err)
			}

			if _, err := f.Client.Decide(ctx, client.Decision{RunID: "claim-0100", By: "ana", Channel: client.ChannelCLI, PayloadSHA256: again.Wait.PayloadSHA256}); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("claim-0100", checkpoint.StatusCompleted, 20*time.Second)
			list, err = payments.Client{BaseURL: srv.URL + "/payments"}.List(ctx)
			if err != nil || len(list) != 1 || list[0].Amount != 2500 {
				t.Fatalf("payments %+v (%v), want one of 2500", list, err)
			}
		})
	}
}

// A payout whose idempotency key was already used for another payout is
// refused by the provider; retrying cannot change that, so the run goes
// to the dead letters at once for a person to look, paying nothing more.
func TestReusedPaymentKeyDeadLettersAtOnce(t *testing.T) {
	dir := t.TempDir()
	pay, err := payments.Open(filepath.Join(dir, "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer pay.Close()
	cls, err := claims.Open(filepath.Join(dir, "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/payments/", http.StripPrefix("/payments", pay.Handler()))
	mux.Handle("/claims/", http.StripPrefix("/claims", cls.Handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()
	pc := &payments.Client{BaseURL: srv.URL + "/payments"}
	// Another payout already took the key of claim-0101's payment step.
	if _, _, err := pc.Pay(ctx, "claim-0101:step6", payments.PayRequest{RunID: "other", Claim: "other", Amount: 99, Currency: "EUR", Payee: "someone"}); err != nil {
		t.Fatal(err)
	}

	f := testfleet.New(t, "redis")
	wf := claim.New(claim.Config{PaymentsURL: srv.URL + "/payments", ClaimsURL: srv.URL + "/claims"})
	f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
	f.Start("claim", "claim-0101", "")
	parked := f.WaitStatus("claim-0101", checkpoint.StatusWaiting, 20*time.Second)
	if _, err := f.Client.Decide(ctx, client.Decision{RunID: "claim-0101", By: "ana", Channel: client.ChannelCLI, PayloadSHA256: parked.Wait.PayloadSHA256}); err != nil {
		t.Fatal(err)
	}
	run := f.WaitStatus("claim-0101", checkpoint.StatusDead, 20*time.Second)
	if !strings.Contains(run.Error, "was already used with a different request body") {
		t.Errorf("dead with %q, want the provider's conflict", run.Error)
	}
	snap, err := f.Store.Load(ctx, "claim-0101", checkpoint.AtStep(6))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Failures) != 0 {
		t.Errorf("%d failures recorded: the conflict was retried", len(snap.Failures))
	}
	list, err := pc.List(ctx)
	if err != nil || len(list) != 1 || list[0].Amount != 99 {
		t.Fatalf("payments %+v (%v), want only the other payout", list, err)
	}
}
