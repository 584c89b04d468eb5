package approver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/durable-run/durable/internal/approver"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// The on-call opens the runs page in a real headless Chromium with an
// operators token: finds a dead run in the list, opens it, sees why it
// died, redrives it behind the page's confirmation and watches it
// complete; then redrives a second dead run from the dead-letter page.
// What the store records is what the pages did.
func TestBrowserRunsPages(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no browser")
	}
	// Runs started with tracing on have a trace, which the run's page links.
	tp := sdktrace.NewTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); otel.SetTracerProvider(noop.NewTracerProvider()) })
	h := newHarness(t, "redis", func(c *approver.Config) { c.TraceURL = "https://traces.example/trace/{trace_id}" })
	ctx := context.Background()
	fragileBroken.Store(true)
	dead := []string{"page-dead-1", "page-dead-2"}
	for _, id := range dead {
		if _, _, err := h.client.Start(ctx, client.StartRequest{Workflow: "fragile", RunID: id, Input: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(id, checkpoint.StatusDead)
	}
	h.park("page-wait", "cy", "adjusters")

	b := newBrowser(t, 3*time.Minute)
	b.logIn(h.http.URL+"/runs", "ops", h.tokens["ops"])
	row := func(id string) string { return fmt.Sprintf(`#runs tr[data-run=%q]`, id) }
	b.do("see the runs", 15*time.Second, chromedp.WaitVisible(chromedp.CSS(row(dead[0]))), chromedp.WaitVisible(chromedp.CSS(row("page-wait"))))
	b.waitText("#counts", "running 0 · waiting 1 · completed 0 · failed 0 · cancelled 0 · dead 2", 5*time.Second)
	if got := b.text(row(dead[0])); !strings.Contains(got, "fragile") || !strings.Contains(got, "dead") || !strings.Contains(got, "the ledger is down") {
		t.Errorf("the list shows %q", got)
	}

	// Filter: only the dead ones.
	b.do("filter dead runs", 15*time.Second,
		chromedp.SetValue(chromedp.ID("filter-status"), "dead"),
		chromedp.Click(chromedp.ID("apply")),
		chromedp.WaitVisible(chromedp.CSS(row(dead[1]))),
		chromedp.WaitNotPresent(chromedp.CSS(row("page-wait"))),
	)

	// The run's page, and a redrive behind a confirmation.
	fragileBroken.Store(false)
	b.do("open the dead run", 15*time.Second,
		chromedp.Click(chromedp.CSS(row(dead[0])+" a.run-link")),
		chromedp.WaitVisible(chromedp.CSS(`#run[data-status="dead"]`)),
		chromedp.WaitVisible(chromedp.ID("timeline")),
	)
	if got := b.text("#run"); !strings.Contains(got, dead[0]) || !strings.Contains(got, "the ledger is down") || !strings.Contains(got, "fragile v1") {
		t.Errorf("the run page shows %q", got)
	}
	traceID := client.TraceID(h.run(dead[0]))
	attr, err := chromedp.Run(b.ctx, chromedp.AttributeValue(chromedp.CSS("a.trace-link"), "href"))
	href := attr.Value
	if err != nil || traceID == "" || href != "https://traces.example/trace/"+traceID || !strings.Contains(b.text("#run"), traceID) {
		t.Errorf("trace link %q, run's trace %q (%v)", href, traceID, err)
	}
	b.do("ask to redrive, then confirm", 15*time.Second,
		chromedp.Click(chromedp.CSS(".redrive button.ask")),
		chromedp.WaitVisible(chromedp.CSS(".redrive .confirm")),
		chromedp.Click(chromedp.CSS(".redrive button.yes")),
	)
	b.do("watch it complete", 20*time.Second, chromedp.WaitVisible(chromedp.CSS(`#run[data-status="completed"]`)))
	done := h.waitStatus(dead[0], checkpoint.StatusCompleted)
	if e := lastAudit(done); done.Redrives != 1 || e.Kind != checkpoint.AuditRedriven || e.By != "ops" || e.Channel != client.ChannelPage {
		t.Errorf("redriven run: %d redrives, last audit %+v", done.Redrives, e)
	}

	// The dead-letter page: the first letter's run is completed now (no
	// redrive offered), the second is redriven from here.
	letter := func(id string) string { return fmt.Sprintf(`#dlq tr[data-run=%q]`, id) }
	b.do("open the dead letters", 15*time.Second,
		chromedp.Navigate(h.http.URL+"/dlq"),
		chromedp.WaitVisible(chromedp.CSS(letter(dead[1])+" button.ask")),
		chromedp.WaitNotPresent(chromedp.CSS(letter(dead[0])+" button.ask")),
	)
	if got := b.text(letter(dead[0])); !strings.Contains(got, "completed") || !strings.Contains(got, "the ledger is down") {
		t.Errorf("the first dead letter shows %q", got)
	}
	b.do("redrive the second from the dead letters", 20*time.Second,
		chromedp.Click(chromedp.CSS(letter(dead[1])+" button.ask")),
		chromedp.Click(chromedp.CSS(letter(dead[1])+" button.yes")),
		chromedp.WaitNotPresent(chromedp.CSS(letter(dead[1])+" button.ask")),
	)
	h.waitStatus(dead[1], checkpoint.StatusCompleted)
	b.waitText(letter(dead[1])+" td.status", "completed", 10*time.Second)
	// The waiting run was never touched.
	if r := h.run("page-wait"); r.Status != checkpoint.StatusWaiting || len(r.Audit) != 1 {
		t.Errorf("page-wait: %s, audit %+v", r.Status, r.Audit)
	}
}
