package approver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// An adjuster opens the inbox page in a real headless Chromium, logs in
// with her token, sees the pending claim with its payload and hash,
// approves it with a reason and watches the run complete; then rejects a
// second claim. What the store records is what the page showed.
func TestBrowserInboxApprovesAndRejects(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no browser")
	}
	h := newHarness(t, "redis", nil)
	// Claims are started by intake, so ana may decide them (four eyes).
	startClaim := func(id string, amount int) checkpoint.Run {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		input := fmt.Sprintf(`{"group": "adjusters", "amount": %d}`, amount)
		if _, _, err := h.client.Start(ctx, client.StartRequest{Workflow: "approval", RunID: id, Input: []byte(input), By: "intake"}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		return h.waitStatus(id, checkpoint.StatusWaiting)
	}
	yes := startClaim("claim-page-yes", 2315)

	b := newBrowser(t, 2*time.Minute)
	b.logIn(h.http.URL+"/", "ana", h.tokens["ana"])

	item := fmt.Sprintf(`.approval[data-run=%q]`, yes.ID)
	b.do("wait for the pending claim", 15*time.Second, chromedp.WaitVisible(chromedp.CSS(item)))
	shown := b.text(item)
	for _, want := range []string{yes.ID, `"amount": 2315`, "payload sha256 " + yes.Wait.PayloadSHA256, "group adjusters", "step 1 ask"} {
		if !strings.Contains(shown, want) {
			t.Errorf("the page shows %q, which lacks %q", shown, want)
		}
	}
	b.waitText("#count", "1 pending", 5*time.Second)

	b.do("approve with a reason", 15*time.Second,
		chromedp.SendKeys(chromedp.CSS(item+" .reason"), "photos match the estimate"),
		chromedp.Click(chromedp.CSS(item+" .approve")),
		chromedp.WaitNotPresent(chromedp.CSS(item)),
	)
	done := h.waitStatus(yes.ID, checkpoint.StatusCompleted)
	if len(done.Approvals) != 1 {
		t.Fatalf("approvals %+v", done.Approvals)
	}
	ap := done.Approvals[0]
	if ap.By != "ana" || ap.Channel != client.ChannelPage || ap.Decision != checkpoint.DecisionApproved || ap.Step != 1 ||
		ap.PayloadSHA256 != yes.Wait.PayloadSHA256 || !strings.Contains(shown, ap.PayloadSHA256) ||
		string(ap.Payload) != string(yes.Wait.Payload) || ap.Reason != "photos match the estimate" {
		t.Fatalf("approval recorded %+v", ap)
	}
	// The page says so, and its next refresh from the server agrees.
	if got := b.text("#status"); !strings.HasPrefix(got, "approved "+yes.ID+" step 1 (sha256 "+yes.Wait.PayloadSHA256[:12]) {
		t.Errorf("status after approving: %q", got)
	}
	b.waitText("#count", "0 pending", 5*time.Second)
	b.do("see the empty inbox", 5*time.Second,
		chromedp.WaitVisible(chromedp.ID("empty")),
		chromedp.WaitNotPresent(chromedp.CSS(item)),
	)

	// A second claim appears on the page's own refresh, and is rejected.
	no := startClaim("claim-page-no", 990)
	item = fmt.Sprintf(`.approval[data-run=%q]`, no.ID)
	b.do("wait for the second claim", 15*time.Second, chromedp.WaitVisible(chromedp.CSS(item)))
	if shown := b.text(item); !strings.Contains(shown, `"amount": 990`) || !strings.Contains(shown, no.Wait.PayloadSHA256) {
		t.Errorf("the page shows %q", shown)
	}
	b.do("reject with a reason", 15*time.Second,
		chromedp.SendKeys(chromedp.CSS(item+" .reason"), "duplicate of claim-page-yes"),
		chromedp.Click(chromedp.CSS(item+" .reject")),
		chromedp.WaitNotPresent(chromedp.CSS(item)),
	)
	failed := h.waitStatus(no.ID, checkpoint.StatusFailed)
	if failed.Error != "rejected by ana" || len(failed.Approvals) != 1 {
		t.Fatalf("failed run: error %q, approvals %+v", failed.Error, failed.Approvals)
	}
	ap = failed.Approvals[0]
	if ap.By != "ana" || ap.Channel != client.ChannelPage || ap.Decision != checkpoint.DecisionRejected ||
		ap.PayloadSHA256 != no.Wait.PayloadSHA256 || ap.Reason != "duplicate of claim-page-yes" {
		t.Fatalf("rejection recorded %+v", ap)
	}
	b.waitText("#count", "0 pending", 5*time.Second)
}
