package fleetcheck_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
)

// fixture is a store and a payments API to plant runs and payments in.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	store checkpoint.Store
	pay   payments.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: runs redis-server")
	}
	opt, err := redis.ParseURL(testenv.StartRedis(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	srv, err := payments.Open(filepath.Join(t.TempDir(), "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	mux := http.NewServeMux()
	mux.Handle("/demo/payments/", http.StripPrefix("/demo/payments", srv.Handler()))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return &fixture{t: t, ctx: context.Background(), store: redisstore.New(rdb, redisstore.Options{}), pay: payments.Client{BaseURL: hs.URL + "/demo/payments"}}
}

// run plants run id with steps checkpoints, ending with status.
func (f *fixture) run(id string, steps int, status checkpoint.Status, reason string) {
	f.t.Helper()
	r, err := f.store.CreateRun(f.ctx, checkpoint.Run{ID: id, Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1, StepName: "s1"})
	if err != nil {
		f.t.Fatal(err)
	}
	for n := 1; n <= steps; n++ {
		cp := checkpoint.Checkpoint{RunID: id, Step: n, Name: fmt.Sprintf("s%d", n), State: []byte(`{}`), Status: checkpoint.StatusRunning, Attempt: 1, At: time.Now()}
		r.Step, r.StepName = n+1, fmt.Sprintf("s%d", n+1)
		if n == steps && status == checkpoint.StatusCompleted {
			cp.Status, r.Status, r.Step = status, status, n
		}
		if r, err = f.store.Commit(f.ctx, r, cp); err != nil {
			f.t.Fatal(err)
		}
	}
	if status != checkpoint.StatusCompleted && status != checkpoint.StatusRunning {
		r.Status, r.Error = status, reason
		if _, err := f.store.UpdateRun(f.ctx, r); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) payment(run, key string, amount int64) {
	f.t.Helper()
	if _, _, err := f.pay.Pay(f.ctx, key, payments.PayRequest{RunID: run, Claim: run, Amount: amount, Currency: "EUR", Payee: "p"}); err != nil {
		f.t.Fatal(err)
	}
}

// has reports whether one of list starts with prefix.
func has(list []string, prefix string) bool {
	return slices.ContainsFunc(list, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// The checker finds each broken invariant it is there for, names the
// run, and passes what holds.
func TestCheck(t *testing.T) {
	f := newFixture(t)
	want := func(id string) fleetcheck.Run {
		return fleetcheck.Run{ID: id, Workflow: "claim", Steps: 3, PayKey: id + ":step2", Amount: 100, Currency: "EUR", PaidAt: 2}
	}
	f.run("good", 3, checkpoint.StatusCompleted, "")
	f.payment("good", "good:step2", 100)
	f.run("dup", 3, checkpoint.StatusCompleted, "")
	f.payment("dup", "dup:step2", 100)
	f.payment("dup", "dup:other", 100)
	f.run("unpaid", 3, checkpoint.StatusCompleted, "")
	f.run("short", 2, checkpoint.StatusCompleted, "")
	f.payment("short", "short:step2", 100)
	f.run("wrong", 3, checkpoint.StatusCompleted, "")
	f.payment("wrong", "wrong:step2", 99)
	f.run("parked", 1, checkpoint.StatusRunning, "")
	f.run("dead", 0, checkpoint.StatusDead, "max attempts")
	f.run("failing", 1, checkpoint.StatusRunning, "")
	if _, err := f.store.RecordFailure(f.ctx, "failing", checkpoint.AtStep(2), checkpoint.Failure{Attempt: 1, Error: "nats: timeout"}); err != nil {
		t.Fatal(err)
	}
	f.payment("nobody", "nobody:step2", 100)
	var runs []fleetcheck.Run
	for _, id := range []string{"good", "dup", "unpaid", "short", "wrong", "parked", "dead", "failing", "missing"} {
		runs = append(runs, want(id))
	}

	rep, err := fleetcheck.Check(f.ctx, f.store, f.pay.BaseURL, runs, fleetcheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"dup: DUPLICATE: 2 payments", "dup: payment pay_000003: key dup:other", "unpaid: completed without a payment under unpaid:step2",
		"short: completed with 2 checkpoints, want 3", "wrong: payment pay_", `payment pay_000006 (key nobody:step2) for unknown run "nobody"`} {
		if !has(rep.Problems, p) {
			t.Errorf("no problem %q in %q", p, rep.Problems)
		}
	}
	if has(rep.Problems, "good") || len(rep.Problems) != 6 {
		t.Errorf("problems %q, want the six planted", rep.Problems)
	}
	for _, u := range []string{"parked: running at step 2", "dead: dead at step 1 (s1): max attempts", "failing: running", "missing: no run record"} {
		if !has(rep.Unfinished, u) {
			t.Errorf("%q not in the unfinished %q", u, rep.Unfinished)
		}
	}
	if rep.Duplicates != 1 || rep.Payments != 6 || rep.Completed != 5 || rep.Dead != 1 || rep.Checkpoints != 3*4+2+1+1 {
		t.Errorf("report %+v", rep)
	}
	if len(rep.StepFailures) != 1 || !strings.HasPrefix(rep.StepFailures[0], "failing:2 attempt 1: nats: timeout") {
		t.Errorf("step failures %q", rep.StepFailures)
	}
	if rep.Statuses["claim"]["missing"] != 1 || rep.Statuses["claim"][checkpoint.StatusCompleted] != 5 {
		t.Errorf("statuses %v", rep.Statuses)
	}

	// A suite that lets runs end dead takes one with its reason.
	rep, err = fleetcheck.Check(f.ctx, f.store, f.pay.BaseURL, runs, fleetcheck.Options{AllowEnded: true})
	if err != nil {
		t.Fatal(err)
	}
	if has(rep.Unfinished, "dead") || !has(rep.Ended, "dead dead at step 1 (s1): max attempts") {
		t.Errorf("unfinished %q, ended %q", rep.Unfinished, rep.Ended)
	}
}

// A run that waits for a decision must hold it, every decision on a run
// must be in its audit, and every decision an API accepted must be on its
// run.
func TestCheckDecisions(t *testing.T) {
	f := newFixture(t)
	decide := func(id string, a checkpoint.Approval, audited bool) {
		t.Helper()
		f.run(id, 3, checkpoint.StatusCompleted, "")
		f.payment(id, id+":step2", 100)
		r, err := f.store.GetRun(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		r.Approvals = []checkpoint.Approval{a}
		if audited {
			r.Audit = []checkpoint.AuditEntry{{Kind: checkpoint.AuditDecision, Step: a.Step, By: a.By, Channel: a.Channel, Decision: a.Decision, PayloadSHA256: a.PayloadSHA256}}
		}
		if _, err := f.store.UpdateRun(f.ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ok := checkpoint.Approval{Step: 1, By: "ana", Channel: "api", Decision: checkpoint.DecisionApproved, PayloadSHA256: "h"}
	decide("ok", ok, true)
	decide("unaudited", ok, false)
	other := ok
	other.By = "bob"
	decide("other", other, true)
	rejected := ok
	rejected.Decision = checkpoint.DecisionRejected
	decide("rejected", rejected, true)
	var runs []fleetcheck.Run
	for _, id := range []string{"ok", "unaudited", "other", "rejected"} {
		runs = append(runs, fleetcheck.Run{ID: id, Workflow: "claim", Steps: 3, PayKey: id + ":step2", Amount: 100, PaidAt: 2,
			Approval: &fleetcheck.Approval{By: "ana", Channel: "api", Step: 1}})
	}
	accepted := map[string][]fleetcheck.Decision{"ok": {{By: "ana", Step: 1, SHA256: "h"}}, "unaudited": {{By: "ana", Step: 1, SHA256: "stale"}}}
	rep, err := fleetcheck.Check(f.ctx, f.store, f.pay.BaseURL, runs, fleetcheck.Options{Accepted: accepted})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"unaudited: decision approved by ana on h at step 1 is not in the audit",
		"unaudited: the API accepted a decision on stale at step 1",
		"other: completed without the decision it waits for", "rejected: completed without the decision it waits for"}
	for _, p := range want {
		if !has(rep.Problems, p) {
			t.Errorf("no problem %q in %q", p, rep.Problems)
		}
	}
	if len(rep.Problems) != len(want) {
		t.Errorf("problems %q, want %d", rep.Problems, len(want))
	}
	if rep.DecisionsRecorded != 4 || rep.DecisionsAudited != 3 || rep.DecisionsAccepted != 2 {
		t.Errorf("decisions: %d recorded, %d audited, %d accepted", rep.DecisionsRecorded, rep.DecisionsAudited, rep.DecisionsAccepted)
	}
}
