package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// Recv: the wait while no signal came, the signal once one did, and a
// permanent ErrSignalExpired once the wait expired with none.
func TestRecv(t *testing.T) {
	w := steps.New[order]("orders", 1)
	reviewed := w.Signal("reviewed")
	var got *checkpoint.Signal
	w.Step("review", func(_ context.Context, s *steps.Context, st order) (steps.Outcome[order], error) {
		sig, wait, err := steps.Recv(s, reviewed, time.Hour)
		if sig == nil {
			return wait, err
		}
		got = sig
		return steps.Complete(st), nil
	})
	run := func(signals ...checkpoint.Signal) (steps.Result, error) {
		s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, StepName: "review", Signals: signals})
		return w.Execute(context.Background(), s, "review", json.RawMessage(`{}`), false)
	}
	res, err := run()
	if err != nil || res.Kind != steps.KindWait || res.Signal == nil || *res.Signal != (steps.SignalWait{Name: "reviewed", TTL: time.Hour}) {
		t.Fatalf("no signal yet: %+v, %v; want a wait for reviewed, 1h", res, err)
	}
	res, err = run(checkpoint.Signal{Name: "other", ID: "s0"}, checkpoint.Signal{Name: "reviewed", ID: "s1", Data: json.RawMessage(`{"ok":true}`)})
	if err != nil || res.Kind != steps.KindComplete || got == nil || got.ID != "s1" {
		t.Fatalf("signal came: %+v, %v, read %+v", res, err, got)
	}
	_, err = run(checkpoint.Signal{Name: "reviewed", ID: "expired:1:0", Expired: true, At: time.Now()})
	if !errors.Is(err, steps.ErrSignalExpired) || !steps.IsPermanent(err) {
		t.Fatalf("expired: %v, want a permanent ErrSignalExpired", err)
	}
}

// Decision: Park while nobody decided on the payload, the decision once
// someone did, an error for a payload that does not encode.
func TestDecision(t *testing.T) {
	req := steps.ApprovalRequest{Payload: map[string]int{"amount": 1840}, Group: "adjusters"}
	sum, err := steps.PayloadSHA256(req.Payload)
	if err != nil {
		t.Fatal(err)
	}
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2})
	d, wait, err := steps.Decision[order](s, req)
	if d != nil || err != nil || wait.Kind() != steps.KindWait {
		t.Fatalf("undecided: %+v, %v, %v; want the wait", d, wait.Kind(), err)
	}
	other := checkpoint.Approval{Step: 2, By: "ann", Decision: checkpoint.DecisionApproved, PayloadSHA256: "0000"}
	if d, _, _ := steps.Decision[order](steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, Approvals: []checkpoint.Approval{other}}), req); d != nil {
		t.Fatalf("a decision on another payload counted: %+v", d)
	}
	taken := checkpoint.Approval{Step: 2, By: "bob", Decision: checkpoint.DecisionRejected, PayloadSHA256: sum, Reason: "no receipt"}
	d, wait, err = steps.Decision[order](steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, Approvals: []checkpoint.Approval{taken}}), req)
	if d == nil || d.By != "bob" || d.Approved() || err != nil || wait.Kind() != 0 {
		t.Fatalf("decided: %+v, %v, %v", d, wait.Kind(), err)
	}
	bad := steps.ApprovalRequest{Payload: func() {}, Group: "adjusters"}
	if d, _, err := steps.Decision[order](s, bad); d != nil || !steps.IsPermanent(err) {
		t.Fatalf("a payload that does not encode: %+v, %v", d, err)
	}
}

// RunChildren: the outcome that starts the children and comes back to the
// same step, then their results when the step runs again after them;
// children of another step, or none, are not waited for.
func TestRunChildren(t *testing.T) {
	w := steps.New[order]("orders", 1)
	var results []steps.ChildResult
	w.Step("fan", func(_ context.Context, s *steps.Context, st order) (steps.Outcome[order], error) {
		kids := make([]steps.Child, st.Items)
		for i := range kids {
			kids[i] = steps.Child{Workflow: "summarize", Input: i}
		}
		res, wait, err := steps.RunChildren(s, st, kids...)
		if res == nil {
			return wait, err
		}
		results = res
		return steps.Complete(st), nil
	})
	run := func(step int, ended ...steps.ChildResult) steps.Result {
		t.Helper()
		results = nil
		s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: step, StepName: "fan", Children: ended})
		res, err := w.Execute(context.Background(), s, "fan", json.RawMessage(`{"items":2}`), false)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(3)
	want := []checkpoint.Child{{ID: "r-s3-1", Workflow: "summarize", Input: json.RawMessage(`0`)}, {ID: "r-s3-2", Workflow: "summarize", Input: json.RawMessage(`1`)}}
	if res.Kind != steps.KindChildren || res.Next != "fan" || !reflect.DeepEqual(res.Children, want) {
		t.Fatalf("first run: %+v; want the children of step 3, then fan again", res)
	}
	ended := []steps.ChildResult{{ID: "r-s3-1", Workflow: "summarize", Status: checkpoint.StatusCompleted}, {ID: "r-s3-2", Workflow: "summarize", Status: checkpoint.StatusFailed}}
	if res := run(4, ended...); res.Kind != steps.KindComplete || !reflect.DeepEqual(results, ended) {
		t.Fatalf("after the children: %+v, read %+v", res, results)
	}
	// The children step 3 started are not step 5's: it starts its own.
	if res := run(6, ended...); res.Kind != steps.KindChildren || res.Children[0].ID != "r-s6-1" {
		t.Fatalf("another step's children: %+v", res)
	}
	none := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1})
	if res, wait, err := steps.RunChildren(none, order{}); res == nil || len(res) != 0 || wait.Kind() != 0 || err != nil {
		t.Fatalf("no children: %v, %v, %v; want an empty list at once", res, wait.Kind(), err)
	}
}
