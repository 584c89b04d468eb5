package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

type fanIn struct {
	N    int    `json:"n"`
	Join string `json:"join"`
	To   string `json:"to"`
}

type fanBranch struct {
	I int `json:"i"`
}

// fanFlow splits into N branches of To and joins at Join, both looked up
// in its Refs by name: "other" is the Ref of another workflow, a name
// not there the zero Ref.
func fanFlow() *steps.Workflow[fanIn] {
	w := steps.New[fanIn]("fan", 1)
	other := steps.New[fanIn]("other", 1)
	twice := func(_ context.Context, s *steps.Context, in fanBranch) (int, error) { return 2 * in.I, nil }
	double := steps.AddBranch(w, "double", twice)
	joins := map[string]steps.Ref[fanIn]{"sum": w.Ref("sum"), "other": other.Ref("sum")}
	tos := map[string]steps.BranchRef[fanBranch, int]{"double": double, "other": steps.AddBranch(other, "double", twice)}
	return w.Step("split", func(_ context.Context, _ *steps.Context, st fanIn) (steps.Outcome[fanIn], error) {
		bs := make([]steps.Branch, st.N)
		for i := range bs {
			bs[i] = tos[st.To].With(fanBranch{I: i + 1})
		}
		return steps.FanOut(joins[st.Join], st, bs...), nil
	}).Step("sum", func(_ context.Context, s *steps.Context, st fanIn) (steps.Outcome[fanIn], error) {
		outs, err := double.Outputs(s)
		if err != nil {
			return steps.Outcome[fanIn]{}, err
		}
		st.N = 0
		for _, o := range outs {
			st.N += o
		}
		return steps.Complete(st), nil
	})
}

func TestFanOutResult(t *testing.T) {
	wf := fanFlow()
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, StepName: "split"})
	res, err := wf.Execute(context.Background(), s, "split", json.RawMessage(`{"n":3,"join":"sum","to":"double"}`), false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != steps.KindFanOut || res.Next != "sum" || len(res.Branches) != 3 || res.Branches[2].Step != "double" || string(res.Branches[2].Input) != `{"i":3}` {
		t.Fatalf("result %+v", res)
	}
	b := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, Branch: 3, StepName: "double"})
	if b.IdempotencyKey() != "r:step2.3" || b.Branch() != 3 {
		t.Fatalf("branch key %q", b.IdempotencyKey())
	}
	out, err := wf.ExecuteBranch(context.Background(), b, "double", res.Branches[2].Input)
	if err != nil || string(out) != "6" {
		t.Fatalf("branch output %s, %v", out, err)
	}
	j := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, StepName: "sum", BranchOutputs: []json.RawMessage{json.RawMessage("2"), json.RawMessage("4"), out}})
	res, err = wf.Execute(context.Background(), j, "sum", json.RawMessage(`{}`), false)
	if err != nil || string(res.State) != `{"n":12,"join":"","to":""}` {
		t.Fatalf("join %s, %v", res.State, err)
	}
}

// A fan-out that cannot run is a permanent error naming what is wrong,
// found when the step returns it, not when its branches are delivered.
func TestFanOutRefused(t *testing.T) {
	wf := fanFlow()
	for _, tc := range []struct{ input, want string }{
		{`{"n":2,"join":"nowhere","to":"double"}`, `the outcome names no step (a zero steps.Ref`},
		{`{"n":2,"join":"other","to":"double"}`, `"sum" is a Ref of workflow other v1`},
		{`{"n":2,"join":"sum","to":"other"}`, `"double", which is not a branch step of the workflow`},
		{`{"n":2,"join":"sum","to":"nowhere"}`, `runs "", which is not a branch step`},
		{`{"n":1001,"join":"sum","to":"double"}`, "at most 1000 branches, not 1001"},
	} {
		s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, StepName: "split"})
		_, err := wf.Execute(context.Background(), s, "split", json.RawMessage(tc.input), false)
		if !steps.IsPermanent(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a permanent error saying %q", tc.input, err, tc.want)
		}
	}
	if checkpoint.MaxBranches != 1000 {
		t.Fatalf("MaxBranches %d", checkpoint.MaxBranches)
	}
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, StepName: "double"})
	if _, err := wf.Execute(context.Background(), s, "double", nil, false); !errors.Is(err, steps.ErrUnknownStep) {
		t.Errorf("a branch step run as a step: %v", err)
	}
	if _, err := wf.ExecuteBranch(context.Background(), s, "sum", nil); !errors.Is(err, steps.ErrUnknownStep) {
		t.Errorf("a step run as a branch: %v", err)
	}
	if _, err := steps.AddBranch(steps.New[fanIn]("y", 1), "b", func(context.Context, *steps.Context, int) (int, error) { return 0, nil }).Outputs(s); !errors.Is(err, steps.ErrNotAJoin) {
		t.Errorf("Outputs outside a join: %v", err)
	}
	x := steps.New[fanIn]("x", 1).Step("a", nil)
	steps.AddBranch[fanIn, int, int](x, "a", nil)
	if err := x.Validate(); err == nil || !strings.Contains(err.Error(), "defined twice") || !strings.Contains(err.Error(), "no function") {
		t.Errorf("validate: %v", err)
	}
}

// A signal that came after its wait expired wins over the expiry.
func TestSignalAfterExpiryWins(t *testing.T) {
	at := time.Now()
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, Signals: []checkpoint.Signal{
		{Name: "go", ID: "expired:1:0", Expired: true, At: at},
		{Name: "go", ID: "sig-1", Data: json.RawMessage(`{"ok":true}`), At: at.Add(time.Second)},
	}})
	sig, err := s.Signal("go")
	if err != nil || sig == nil || sig.ID != "sig-1" {
		t.Fatalf("Signal = %+v, %v; want sig-1", sig, err)
	}
	only := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, Signals: []checkpoint.Signal{{Name: "go", ID: "expired:1:0", Expired: true, At: at}}})
	if _, err := only.Signal("go"); !errors.Is(err, steps.ErrSignalExpired) {
		t.Fatalf("expiry alone: %v", err)
	}
}
