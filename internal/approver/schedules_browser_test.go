package approver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/schedule"
)

// The on-call opens the schedules on the runs page in a real headless
// Chromium: sees the schedule's workflow, cron and zone and its next
// fire, triggers it behind the page's confirmation, sees the run it
// started as the last fire and opens it, then pauses the schedule. What
// the store records is what the page did.
func TestBrowserSchedulesPage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no browser")
	}
	h := newHarness(t, "redis", nil)
	ops := h.tokens["ops"]
	var created schedule.View
	h.call("POST", "/api/schedules", ops, nightly, 201, &created)

	b := newBrowser(t, 3*time.Minute)
	b.logIn(h.http.URL+"/schedules", "ops", ops)
	const row = `#schedules tr[data-schedule="nightly"]`
	b.do("see the schedule", 15*time.Second, chromedp.WaitVisible(chromedp.CSS(row)))
	got := b.text(row)
	for _, want := range []string{"nightly", "approval", "0 2 * * *", "Europe/Berlin", "active"} {
		if !strings.Contains(got, want) {
			t.Errorf("the row shows %q, want %q in it", got, want)
		}
	}
	if next := b.text(row + " td.next"); next == "-" || next == "" {
		t.Errorf("next fire %q", next)
	}

	b.do("trigger it, confirmed", 15*time.Second,
		chromedp.Click(chromedp.CSS(row+" .trigger button.ask")),
		chromedp.WaitVisible(chromedp.CSS(row+" .trigger .confirm")),
		chromedp.Click(chromedp.CSS(row+" .trigger button.yes")),
		chromedp.WaitVisible(chromedp.CSS(row+" td.last a.run-link")),
	)
	var v schedule.View
	h.call("GET", "/api/schedules/nightly", ops, "", 200, &v)
	if v.State.Last == nil || !v.State.Last.Trigger || !triggerIDRE.MatchString(v.State.Last.RunID) {
		t.Fatalf("after the page's trigger: %+v", v.State)
	}
	runID := v.State.Last.RunID
	h.waitStatus(runID, checkpoint.StatusWaiting)
	if last := b.text(row + " td.last"); !strings.Contains(last, runID) || !strings.Contains(last, "started") || !strings.Contains(last, "by ops") {
		t.Errorf("last fire shows %q, want started %s by ops", last, runID)
	}

	b.do("pause it, confirmed", 15*time.Second,
		chromedp.Click(chromedp.CSS(row+" .pause button.ask")),
		chromedp.Click(chromedp.CSS(row+" .pause button.yes")),
		chromedp.WaitVisible(chromedp.CSS(row+" .resume button.ask")),
	)
	b.waitText(row+" td.state", "paused", 5*time.Second)
	b.waitText(row+" td.next", "-", 5*time.Second)
	h.call("GET", "/api/schedules/nightly", ops, "", 200, &v)
	if !v.Spec.Paused || v.UpdatedBy != "ops" {
		t.Errorf("after the page's pause: paused %t, by %q", v.Spec.Paused, v.UpdatedBy)
	}

	b.do("open the last fire's run", 15*time.Second,
		chromedp.Click(chromedp.CSS(row+" td.last a.run-link")),
		chromedp.WaitVisible(chromedp.CSS(`#run[data-status="waiting"]`)),
	)
	if got := b.text("#run"); !strings.Contains(got, runID) {
		t.Errorf("the run page shows %q", got)
	}
}
