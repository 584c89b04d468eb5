package approver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
)

// fragileBroken makes the fragile workflow's step fail permanently: its
// runs go dead, and a redrive after it is cleared completes them.
var fragileBroken atomic.Bool

func fragileFlow() *steps.Workflow[claim] {
	return steps.New[claim]("fragile", 1).
		Step("try", func(_ context.Context, _ *steps.Context, st claim) (steps.Outcome[claim], error) {
			if fragileBroken.Load() {
				return steps.Outcome[claim]{}, steps.Permanent(errors.New("the ledger is down"))
			}
			return steps.Complete(st), nil
		})
}

func TestRunsAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("needs nats-server and redis-server")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) { testRunsAPI(t, kind) })
	}
}

func testRunsAPI(t *testing.T, kind string) {
	h := newHarness(t, kind, nil)
	ops, ana := h.tokens["ops"], h.tokens["ana"]
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		h.park(fmt.Sprintf("%s-wait-%d", kind, i), "cy", "adjusters")
	}
	fragileBroken.Store(true)
	dead := kind + "-dead"
	if _, _, err := h.client.Start(ctx, client.StartRequest{Workflow: "fragile", RunID: dead, Input: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(dead, checkpoint.StatusDead)
	waiting := h.run(kind + "-wait-1")
	deadRun := h.run(dead)

	// Refusals: no token, a token outside operators, bad queries, unknown
	// runs and actions, actions that do not apply. None changes a run.
	for _, c := range []struct {
		method, path, token string
		status              int
		code                string
	}{
		{"GET", "/api/runs", "", 401, approver.CodeUnauthorized},
		{"GET", "/api/runs", ana, 403, approver.CodeForbidden},
		{"GET", "/api/runs/" + dead, ana, 403, approver.CodeForbidden},
		{"GET", "/api/dlq", ana, 403, approver.CodeForbidden},
		{"POST", "/api/runs/" + waiting.ID + "/cancel", ana, 403, approver.CodeForbidden},
		{"POST", "/api/runs/" + dead + "/redrive", "", 401, approver.CodeUnauthorized},
		{"GET", "/api/runs?status=lost", ops, 400, approver.CodeBadRequest},
		{"GET", "/api/runs?workflow=a.b", ops, 400, approver.CodeBadRequest},
		{"GET", "/api/runs?limit=0", ops, 400, approver.CodeBadRequest},
		{"GET", "/api/runs?limit=1001", ops, 400, approver.CodeBadRequest},
		{"GET", "/api/runs?cursor=bm9wZQ", ops, 400, approver.CodeBadRequest},
		{"GET", "/api/runs/no-such-run", ops, 404, approver.CodeNotFound},
		{"GET", "/api/runs/bad%20id", ops, 400, approver.CodeBadRequest},
		{"POST", "/api/runs/no-such-run/cancel", ops, 404, approver.CodeNotFound},
		{"POST", "/api/runs/" + waiting.ID + "/frobnicate", ops, 404, approver.CodeNotFound},
		{"POST", "/api/runs/" + waiting.ID + "/redrive", ops, 409, approver.CodeConflict},
		{"GET", "/api/runs/" + waiting.ID + "/cancel", ops, 405, approver.CodeMethodNotAllowed},
		{"DELETE", "/api/runs/" + waiting.ID, ops, 405, approver.CodeMethodNotAllowed},
	} {
		status, _, body := h.do(c.method, c.path, c.token, "", nil)
		var eb approver.ErrorBody
		if status != c.status || json.Unmarshal(body, &eb) != nil || eb.Code != c.code || eb.Error == "" {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.path, status, body, c.status, c.code)
		}
	}
	h.assertUnchanged(waiting)
	h.assertUnchanged(deadRun)

	// The list, a page at a time, newest first, with counts.
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 4 {
			t.Fatalf("more pages than runs: %v", got)
		}
		status, _, body := h.do("GET", "/api/runs?limit=2&cursor="+cursor, ops, "", nil)
		var p approver.RunsPage
		if status != 200 || json.Unmarshal(body, &p) != nil {
			t.Fatalf("GET /api/runs: %d %s", status, body)
		}
		if p.Counts[checkpoint.StatusWaiting] != 3 || p.Counts[checkpoint.StatusDead] != 1 || p.Counts[checkpoint.StatusCompleted] != 0 {
			t.Errorf("counts %v, want 3 waiting, 1 dead", p.Counts)
		}
		if len(p.Runs) > 2 {
			t.Fatalf("page of %d runs, limit 2", len(p.Runs))
		}
		for _, r := range p.Runs {
			got = append(got, r.RunID)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	want := []string{dead, kind + "-wait-3", kind + "-wait-2", kind + "-wait-1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("runs over the pages %v, want newest first %v", got, want)
	}
	status, _, body := h.do("GET", "/api/runs?status=dead&workflow=fragile", ops, "", nil)
	var p approver.RunsPage
	if status != 200 || json.Unmarshal(body, &p) != nil || len(p.Runs) != 1 || p.Runs[0].RunID != dead || p.NextCursor != "" {
		t.Errorf("dead runs of fragile: %d %s", status, body)
	}

	// One run: the record of `runs show --json`.
	status, _, body = h.do("GET", "/api/runs/"+dead, ops, "", nil)
	var view client.RunView
	if status != 200 || json.Unmarshal(body, &view) != nil || view.RunID != dead || view.Status != checkpoint.StatusDead || !strings.Contains(view.Error, "the ledger is down") {
		t.Errorf("GET /api/runs/%s: %d %s", dead, status, body)
	}

	// The dead letters, with their runs' status now.
	status, _, body = h.do("GET", "/api/dlq", ops, "", nil)
	var dls approver.DeadLetters
	if status != 200 || json.Unmarshal(body, &dls) != nil || len(dls.DeadLetters) != 1 || dls.DeadLetters[0].RunID != dead || dls.DeadLetters[0].RunStatus != checkpoint.StatusDead {
		t.Errorf("GET /api/dlq: %d %s", status, body)
	}

	// Redrive the dead run once its cause is fixed: it completes, audited
	// with the operator and the API as channel.
	fragileBroken.Store(false)
	status, _, body = h.do("POST", "/api/runs/"+dead+"/redrive", ops, "", nil)
	var res approver.ActionResult
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Status != checkpoint.StatusRunning || res.By != "ops" || res.Channel != client.ChannelAPI {
		t.Fatalf("redrive: %d %s", status, body)
	}
	redriven := h.waitStatus(dead, checkpoint.StatusCompleted)
	if e := lastAudit(redriven); e.Kind != checkpoint.AuditRedriven || e.By != "ops" || e.Channel != client.ChannelAPI {
		t.Errorf("redrive audited as %+v", e)
	}

	// Cancel a waiting run from the page: audited so; a second cancel is
	// refused.
	status, _, body = h.do("POST", "/api/runs/"+waiting.ID+"/cancel", ops, "", map[string]string{approver.ChannelHeader: "page"})
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Status != checkpoint.StatusCancelled || res.Channel != client.ChannelPage {
		t.Fatalf("cancel: %d %s", status, body)
	}
	cancelled := h.run(waiting.ID)
	if e := lastAudit(cancelled); cancelled.Status != checkpoint.StatusCancelled || e.Kind != checkpoint.AuditCancelled || e.By != "ops" || e.Channel != client.ChannelPage {
		t.Errorf("cancelled run %s, last audit %+v", cancelled.Status, e)
	}
	if status, _, body := h.do("POST", "/api/runs/"+waiting.ID+"/cancel", ops, "", nil); status != http.StatusConflict {
		t.Errorf("second cancel: %d %s", status, body)
	}
	h.assertUnchanged(cancelled)
}

func lastAudit(r checkpoint.Run) checkpoint.AuditEntry {
	if len(r.Audit) == 0 {
		return checkpoint.AuditEntry{}
	}
	return r.Audit[len(r.Audit)-1]
}
