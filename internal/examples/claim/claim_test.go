package claim_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/claims"
	"github.com/durable-run/durable/internal/examples/claim"
	"github.com/durable-run/durable/internal/payments"
	"github.com/durable-run/durable/internal/testenv"
	"github.com/durable-run/durable/internal/testfleet"
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
