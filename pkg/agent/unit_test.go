package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// These tests need no broker and no store: they run the workflow's steps
// through steps.Definition.Execute with an in-memory step context, as the
// worker would, and check the pure parts (prices, budgets, logs) directly.

// unitStep runs step name of wf once, as step n of run r1. first means the
// state is the run's input.
func unitStep(t testing.TB, wf steps.Definition, name string, n int, state string, first bool) (*steps.Context, steps.Result, error) {
	t.Helper()
	s := steps.NewContext(steps.ContextConfig{RunID: "r1", Workflow: wf.Name(), Version: wf.Version(), Step: n, StepName: name, Attempt: 1})
	res, err := wf.Execute(context.Background(), s, name, json.RawMessage(state), first)
	return s, res, err
}

func unitState(t testing.TB, res steps.Result) agent.State {
	t.Helper()
	var st agent.State
	if err := json.Unmarshal(res.State, &st); err != nil {
		t.Fatalf("decode state %s: %v", res.State, err)
	}
	return st
}

func noopTool(name string) *agent.Tool {
	return agent.NewTool(name, "", "", func(context.Context, agent.Key, struct{}) (string, error) { return "ok", nil })
}

func TestParsePrices(t *testing.T) {
	good := []struct {
		in   string
		want agent.Prices
	}{
		{"a=3/15, b-1=2.5/10", agent.Prices{"a": {Input: 3, Output: 15}, "b-1": {Input: 2.5, Output: 10}}},
		{"  claude-sonnet-4-5=3/15 ,,\tgpt-4o=0/0.5  ", agent.Prices{"claude-sonnet-4-5": {Input: 3, Output: 15}, "gpt-4o": {Input: 0, Output: 0.5}}},
		{"", agent.Prices{}},
		{" , ", agent.Prices{}},
	}
	for _, tc := range good {
		got, err := agent.ParsePrices(tc.in)
		if err != nil {
			t.Errorf("ParsePrices(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParsePrices(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{"a=3", "=1/2", "a=x/1", "a=1/x", "a=-1/2", "a=1/-2", "a", "a=3/15,b", "a=/1", "a=1/2,a=3/4"} {
		if p, err := agent.ParsePrices(in); err == nil {
			t.Errorf("ParsePrices(%q) = %v, want an error", in, p)
		} else if !strings.Contains(err.Error(), "model price") {
			t.Errorf("ParsePrices(%q): error %q does not name the bad price", in, err)
		}
	}
}

// A name with a space before '=' is kept with the space and then prices
// no model: "claude =3/15" leaves claude's spend at zero.
func TestParsePricesTrimsNames(t *testing.T) {
	p, err := agent.ParsePrices("a =3/15")
	if err != nil {
		return // refusing it is as good as trimming
	}
	if _, ok := p.Cost("a-1", model.Usage{InputTokens: 1}); !ok {
		t.Errorf(`ParsePrices("a =3/15") = %#v: model a-1 has no price`, p)
	}
}

// A NaN price makes every cost NaN, and NaN >= MaxSpend is false: the
// spend budget would never be reached.
func TestParsePricesRefusesNonFinite(t *testing.T) {
	for _, in := range []string{"a=NaN/1", "a=1/NaN", "a=Inf/1", "a=1/+Inf"} {
		if p, err := agent.ParsePrices(in); err == nil {
			t.Errorf("ParsePrices(%q) = %v, want an error", in, p)
		}
	}
}

func TestPricesCost(t *testing.T) {
	p := agent.Prices{
		"claude":                     {Input: 1, Output: 2},
		"claude-sonnet-4-5":          {Input: 3, Output: 15},
		"claude-sonnet-4-5-20250929": {Input: 4, Output: 20},
		"gpt-4o":                     {Input: 2.5, Output: 10},
	}
	u := model.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}
	cases := []struct {
		name string
		cost float64
		ok   bool
	}{
		{"claude-sonnet-4-5", 18, true},
		{"claude-sonnet-4-5-20250929", 24, true}, // the exact name is the longest prefix
		{"claude-sonnet-4-5-20991231", 18, true},
		{"claude-haiku-4", 3, true},
		{"claude", 3, true},
		{"gpt-4o-mini", 12.5, true},
		{"gpt-4", 0, false},
		{"", 0, false},
		{"sonnet", 0, false},
	}
	for _, tc := range cases {
		// Map order varies between calls: ask a few times.
		for i := 0; i < 5; i++ {
			cost, ok := p.Cost(tc.name, u)
			if cost != tc.cost || ok != tc.ok {
				t.Fatalf("Cost(%q) = %v, %v; want %v, %v", tc.name, cost, ok, tc.cost, tc.ok)
			}
		}
	}
	// Per million tokens, exactly.
	if cost, _ := p.Cost("claude-sonnet-4-5", model.Usage{InputTokens: 1000, OutputTokens: 2000}); cost != 0.033 {
		t.Errorf("1000 in + 2000 out at 3/15: %v, want 0.033", cost)
	}
	if cost, ok := p.Cost("claude-sonnet-4-5", model.Usage{}); cost != 0 || !ok {
		t.Errorf("no tokens: %v, %v; want 0, true", cost, ok)
	}
	if cost, ok := agent.Prices(nil).Cost("claude", u); cost != 0 || ok {
		t.Errorf("nil prices: %v, %v; want 0, false", cost, ok)
	}
}

func TestCheckThenAct(t *testing.T) {
	type args struct{ Amount int }
	errLookup := errors.New("payments API down")
	cases := []struct {
		name      string
		found     bool
		lookupErr error
		wantActs  int
		want      string
	}{
		{"found", true, nil, 0, "pay_old"},
		{"not found", false, nil, 1, "pay_new"},
		{"lookup fails", false, errLookup, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var looked, acted []agent.Key
			var actedWith []args
			fn := agent.CheckThenAct(
				func(_ context.Context, key agent.Key) (string, bool, error) {
					looked = append(looked, key)
					if tc.lookupErr != nil {
						return "partial", true, tc.lookupErr
					}
					if tc.found {
						return "pay_old", true, nil
					}
					return "", false, nil
				},
				func(_ context.Context, key agent.Key, a args) (string, error) {
					acted = append(acted, key)
					actedWith = append(actedWith, a)
					return "pay_new", nil
				})
			got, err := fn(context.Background(), "r1:step4", args{Amount: 7})
			if tc.lookupErr != nil {
				if !errors.Is(err, tc.lookupErr) {
					t.Fatalf("error %v does not wrap the lookup's", err)
				}
				if !strings.Contains(err.Error(), "r1:step4") {
					t.Errorf("error %q does not name the key", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("returned %q, want %q", got, tc.want)
			}
			if len(looked) != 1 || looked[0] != "r1:step4" {
				t.Errorf("looked up %v, want once with r1:step4", looked)
			}
			if len(acted) != tc.wantActs {
				t.Fatalf("acted %d times, want %d", len(acted), tc.wantActs)
			}
			if tc.wantActs == 1 && (acted[0] != "r1:step4" || actedWith[0].Amount != 7) {
				t.Errorf("acted with %v %+v, want r1:step4 and the call's args", acted[0], actedWith[0])
			}
		})
	}
}

func TestToolDefinition(t *testing.T) {
	schema := `{"type":"object","properties":{"order_id":{"type":"string"}}}`
	tool := agent.NewTool("lookup_order", "Look up an order.", schema,
		func(context.Context, agent.Key, struct{}) (string, error) { return "", nil })
	if tool.Name() != "lookup_order" {
		t.Errorf("Name() = %q", tool.Name())
	}
	def := tool.Def()
	if def.Name != "lookup_order" || def.Description != "Look up an order." || string(def.Schema) != schema {
		t.Errorf("Def() = %+v", def)
	}
	if def := noopTool("ping").Def(); def.Schema != nil {
		t.Errorf("no schema given: Def().Schema = %s, want none", def.Schema)
	}
	if tool.Effect() != tool || tool.NeedsApproval(agent.Approval{Group: "supervisors"}) != tool {
		t.Error("Effect and NeedsApproval must return the tool they were called on")
	}
	if chained := noopTool("x"); chained.Effect().NeedsApproval(agent.Approval{Group: "g"}) != chained {
		t.Error("chained Effect().NeedsApproval() is not the tool")
	}
}

func TestRefuse(t *testing.T) {
	if agent.Refuse(nil) != nil {
		t.Fatal("Refuse(nil) is not nil")
	}
	errUnknown := errors.New("unknown order A-9")
	err := agent.Refuse(errUnknown)
	var refused *agent.RefusedError
	if !errors.As(fmt.Errorf("refund: %w", err), &refused) {
		t.Fatalf("errors.As(*RefusedError) fails on a wrapped refusal %v", err)
	}
	if refused.Err != errUnknown || refused.Unwrap() != errUnknown || !errors.Is(err, errUnknown) {
		t.Errorf("refusal does not unwrap to its cause: %#v", refused)
	}
	if err.Error() != "unknown order A-9" {
		t.Errorf("Error() = %q, want the cause's text", err.Error())
	}
	if errors.As(errUnknown, &refused) {
		t.Error("a plain error reads as a refusal")
	}
}

func TestConfigErrors(t *testing.T) {
	m := &fakeModel{answer: func(int, model.Request) (model.Response, error) { return answer("never"), nil }}
	cases := []struct {
		name string
		cfg  agent.Config
		says string
	}{
		{"no model", agent.Config{}, "no model"},
		{"tool named twice", agent.Config{Model: m, Tools: []*agent.Tool{noopTool("lookup"), noopTool("lookup")}}, "tool lookup given twice"},
		{"tool name with a space", agent.Config{Model: m, Tools: []*agent.Tool{noopTool("look up")}}, `tool name "look up"`},
		{"spend budget without a price", agent.Config{Model: m, ModelName: "m-1", Budget: agent.Budget{MaxSpend: 1}}, `needs a price for model "m-1"`},
		{"spend budget priced for another model", agent.Config{Model: m, ModelName: "m-1", Budget: agent.Budget{MaxSpend: 1}, Prices: agent.Prices{"m-2": {Input: 1}}}, `needs a price for model "m-1"`},
		{"unknown policy", agent.Config{Model: m, Budget: agent.Budget{OnReach: "maybe"}}, `on_reach "maybe"`},
		{"negative budget", agent.Config{Model: m, Budget: agent.Budget{MaxTokens: -1}}, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Name, tc.cfg.Version = "support", 1
			_, _, err := unitStep(t, agent.New(tc.cfg), agent.StepModel, 1, `{"message": "hi"}`, true)
			if err == nil {
				t.Fatal("the first step ran")
			}
			if !steps.IsPermanent(err) || !errors.Is(err, steps.ErrBadState) {
				t.Errorf("error %v: want a permanent ErrBadState (the run cannot start)", err)
			}
			if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "agent support") {
				t.Errorf("error %q should name the agent and say %q", err, tc.says)
			}
		})
	}
	if n := m.calls.Load(); n != 0 {
		t.Errorf("the model was called %d times by misconfigured agents", n)
	}
	// The same configuration with the problem fixed starts.
	ok := agent.Config{Name: "support", Version: 1, Model: m, ModelName: "fake-1", Budget: agent.Budget{MaxSpend: 1, OnReach: agent.Park},
		Prices: agent.Prices{"fake": {Input: 1, Output: 1}}, Tools: []*agent.Tool{noopTool("lookup"), noopTool("refund")}}
	if _, _, err := unitStep(t, agent.New(ok), agent.StepModel, 1, `{"message": "hi"}`, true); err != nil {
		t.Errorf("a valid configuration: %v", err)
	}
}

// New's doc promises configuration errors when the workflow is registered,
// not at each run's first step.
func TestConfigErrorsFailRegistration(t *testing.T) {
	cases := []struct {
		cfg  agent.Config
		says string
	}{
		{agent.Config{}, "no model"},
		{agent.Config{Model: &fakeModel{}, Tools: []*agent.Tool{noopTool("a"), noopTool("a")}}, "tool a given twice"},
		{agent.Config{Model: &fakeModel{}, Budget: agent.Budget{OnReach: "maybe"}}, `on_reach "maybe"`},
	}
	for _, tc := range cases {
		tc.cfg.Name, tc.cfg.Version = "support", 1
		err := steps.NewRegistry().Register(agent.New(tc.cfg))
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Register: %v, want an error saying %q", err, tc.says)
		}
	}
	good := agent.Config{Name: "support", Version: 1, Model: &fakeModel{}, Tools: []*agent.Tool{noopTool("a")}}
	if err := steps.NewRegistry().Register(agent.New(good)); err != nil {
		t.Errorf("Register a valid agent: %v", err)
	}
}

func TestInitInput(t *testing.T) {
	var asked []model.Request
	m := &fakeModel{answer: func(_ int, req model.Request) (model.Response, error) {
		asked = append(asked, req)
		return answer("hello"), nil
	}}
	cfg := agent.Config{Name: "support", Version: 1, Model: m, ModelName: "fake-1", System: "Be brief.", Tools: []*agent.Tool{noopTool("lookup")},
		Budget: agent.Budget{MaxSteps: 7, MaxTokens: 100, OnReach: agent.Park, Group: "ops"}}
	wf := agent.New(cfg)

	for _, in := range []string{`{"message": ""}`, `{"message": "  \n"}`, `{}`, ``, `{"message": "hi"`, `"hi"`,
		`{"message": "hi", "budget": {"on_reach": "maybe"}}`, `{"message": "hi", "budget": {"max_spend": 1}}`, `{"message": "hi", "budget": {"max_tokens": -5}}`} {
		if _, res, err := unitStep(t, wf, agent.StepModel, 1, in, true); err == nil {
			t.Errorf("input %s: started with state %s, want an error", in, res.State)
		} else if !steps.IsPermanent(err) {
			t.Errorf("input %s: %v is not permanent", in, err)
		}
	}
	if len(asked) != 0 {
		t.Fatalf("bad inputs reached the model %d times", len(asked))
	}

	_, res, err := unitStep(t, wf, agent.StepModel, 1, `{"message": "hi", "budget": {"max_tokens": 5}}`, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 {
		t.Fatalf("model asked %d times, want 1", len(asked))
	}
	req := asked[0]
	if req.System != "Be brief." || len(req.Tools) != 1 || req.Tools[0].Name != "lookup" ||
		len(req.Messages) != 1 || req.Messages[0].Role != model.RoleUser || req.Messages[0].Text != "hi" {
		t.Errorf("the first model call was asked %+v, want the system prompt, the tools and one user message %q", req, "hi")
	}
	st := unitState(t, res)
	want := agent.Budget{MaxSteps: 7, MaxTokens: 5, OnReach: agent.Park, Group: "ops"} // the input overrides only what it names
	if st.Budget != want || st.Base != want {
		t.Errorf("budget %+v base %+v, want both %+v", st.Budget, st.Base, want)
	}
	if res.Kind != steps.KindComplete || st.Answer != "hello" {
		t.Errorf("outcome %v answer %q, want complete with %q", res.Kind, st.Answer, "hello")
	}
	tail := st.History.Tail
	if st.History.Len() != 2 || len(tail) != 2 || tail[0].Role != model.RoleUser || tail[0].Text != "hi" || tail[1].Role != model.RoleAssistant || tail[1].Text != "hello" {
		t.Errorf("history %+v, want the user's message and the answer", st.History)
	}
	if st.Usage.ModelCalls != 1 || st.Usage.Tokens() != 150 {
		t.Errorf("usage %+v, want one call of 150 tokens", st.Usage)
	}
}

// One tool step, run as the worker runs it: the tool gets the step's key,
// its result is journaled and joins the history, and ToolLog reads the
// journal back.
func TestToolStep(t *testing.T) {
	type refundArgs struct {
		Order  string `json:"order_id"`
		Amount int    `json:"amount"`
	}
	var keys []agent.Key
	refund := agent.NewTool("refund", "Refund an order.", `{"type":"object"}`, func(_ context.Context, key agent.Key, a refundArgs) (string, error) {
		keys = append(keys, key)
		if a.Amount > 100 {
			return "", agent.Refuse(errors.New("over the order's amount"))
		}
		return "pay_" + a.Order, nil
	}).Effect()
	gated := agent.NewTool("close", "", "", func(context.Context, agent.Key, struct{}) (string, error) {
		t.Error("a gated tool ran without a decision")
		return "", nil
	}).NeedsApproval(agent.Approval{Group: "supervisors"})
	wf := agent.New(agent.Config{Name: "support", Version: 1, Model: &fakeModel{}, Tools: []*agent.Tool{refund, gated}})
	pending := func(calls ...string) string {
		return `{"history": {"tail": [{"role": "user", "text": "refund A-1"}]}, "pending": [` + strings.Join(calls, ",") + `]}`
	}

	t.Run("runs and records", func(t *testing.T) {
		keys = nil
		s, res, err := unitStep(t, wf, agent.StepTool, 4, pending(`{"id": "c1", "name": "refund", "args": {"order_id": "A-1", "amount": 5}}`), false)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) != 1 || keys[0] != "r1:step4" {
			t.Errorf("tool got keys %v, want r1:step4", keys)
		}
		st := unitState(t, res)
		last := st.History.Tail[len(st.History.Tail)-1]
		want := []agent.Result{{CallID: "c1", Tool: "refund", Content: "pay_A-1", Bytes: 7}}
		if res.Kind != steps.KindNext || res.Next != agent.StepModel || len(st.Pending) != 0 || !reflect.DeepEqual(last.Results, want) {
			t.Errorf("outcome %v %s, last entry %+v; want the result in the history and the model next", res.Kind, res.Next, last)
		}
		if effects := s.Effects(); len(effects) != 1 || effects[0].Key != "r1:step4" || effects[0].Replayed {
			t.Errorf("effects %+v, want r1:step4 not replayed", effects)
		}
		log, err := agent.ToolLog([]checkpoint.Checkpoint{{RunID: "r1", Step: 4, Name: agent.StepTool, Journal: s.Calls()}})
		if err != nil {
			t.Fatal(err)
		}
		if len(log) != 1 || log[0].Key != "r1:step4" || log[0].Tool != "refund" || log[0].Content != "pay_A-1" || log[0].IsError {
			t.Errorf("ToolLog of the step: %+v", log)
		}
	})

	t.Run("refused and undecodable calls are told to the model", func(t *testing.T) {
		keys = nil
		for _, tc := range []struct{ call, says string }{
			{`{"id": "c2", "name": "refund", "args": {"order_id": "A-1", "amount": 500}}`, "over the order's amount"},
			{`{"id": "c3", "name": "refund", "args": {"amount": "lots"}}`, "arguments of refund"},
			{`{"id": "c4", "name": "teleport", "args": {}}`, "no such tool"},
		} {
			_, res, err := unitStep(t, wf, agent.StepTool, 6, pending(tc.call), false)
			if err != nil {
				t.Fatalf("%s: %v", tc.call, err)
			}
			st := unitState(t, res)
			r := st.History.Tail[len(st.History.Tail)-1].Results
			if len(r) != 1 || !r[0].IsError || !strings.Contains(r[0].Content, tc.says) || res.Next != agent.StepModel {
				t.Errorf("%s: results %+v, want a failed call saying %q", tc.call, r, tc.says)
			}
		}
		if len(keys) != 1 {
			t.Errorf("the tool ran %d times, want once (undecodable args and unknown tools don't run it)", len(keys))
		}
	})

	t.Run("several calls take a step each", func(t *testing.T) {
		_, res, err := unitStep(t, wf, agent.StepTool, 8, pending(`{"id": "c5", "name": "refund", "args": {"order_id": "A-5", "amount": 1}}`,
			`{"id": "c6", "name": "refund", "args": {"order_id": "A-6", "amount": 1}}`), false)
		if err != nil {
			t.Fatal(err)
		}
		st := unitState(t, res)
		if res.Next != agent.StepTool || len(st.Pending) != 1 || st.Pending[0].ID != "c6" || len(st.Done) != 1 || st.Done[0].CallID != "c5" || st.History.Len() != 1 {
			t.Errorf("after the first of two calls: next %s, state %+v", res.Next, st)
		}
	})

	t.Run("a gated call parks with the exact call", func(t *testing.T) {
		_, res, err := unitStep(t, wf, agent.StepTool, 9, pending(`{"id": "c7", "name": "close", "args": {"why":"done"}}`), false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Kind != steps.KindWait || res.Wait == nil || res.Wait.Group != "supervisors" {
			t.Fatalf("outcome %v wait %+v, want a wait for supervisors", res.Kind, res.Wait)
		}
		want := agent.ToolCallApproval{Run: "r1", Tool: "close", Args: json.RawMessage(`{"why":"done"}`), Key: "r1:step9", CallID: "c7"}
		if !reflect.DeepEqual(res.Wait.Payload, want) {
			t.Errorf("payload %+v, want %+v", res.Wait.Payload, want)
		}
	})
}

// unitReconciler is a payments system in memory: what it holds under each
// key, and what it says about it.
type unitReconciler struct {
	tool     string
	differs  map[agent.Key]string
	keys     []agent.Key
	checkErr error
	keysErr  error
	checked  []agent.Key
}

func (r *unitReconciler) Tool() string { return r.tool }

func (r *unitReconciler) Check(_ context.Context, e agent.LogEntry) (string, error) {
	r.checked = append(r.checked, e.Key)
	return r.differs[e.Key], r.checkErr
}

func (r *unitReconciler) Keys(context.Context, string) ([]agent.Key, error) { return r.keys, r.keysErr }

func TestReconcile(t *testing.T) {
	log := []agent.LogEntry{
		{Run: "r1", Step: 2, Tool: "refund", Key: "r1:step2", Content: "pay_1"},
		{Run: "r1", Step: 3, Tool: "lookup", Key: "r1:step3", Content: "order"},
		{Run: "r1", Step: 4, Tool: "refund", Key: "r1:step4", Content: "pay_2"},
		{Run: "r1", Step: 6, Tool: "refund", Key: "r1:step6", Content: "over the amount", IsError: true},
		{Run: "r2", Step: 2, Tool: "refund", Key: "r2:step2", Content: "pay_9"},
	}
	ctx := context.Background()

	r := &unitReconciler{tool: "refund", differs: map[agent.Key]string{"r1:step4": "amount 20, logged 2"},
		keys: []agent.Key{"r1:step2", "r1:step4", "r1:step6", "r1:step8"}}
	got, err := agent.Reconcile(ctx, "r1", log, r)
	if err != nil {
		t.Fatal(err)
	}
	if want := []agent.Key{"r1:step2", "r1:step4"}; !reflect.DeepEqual(r.checked, want) {
		t.Errorf("checked %v, want %v (other tools, other runs and failed calls are not checked)", r.checked, want)
	}
	if len(got) != 3 {
		t.Fatalf("mismatches %+v, want 3", got)
	}
	if m := got[0]; m.Kind != "differs" || m.Key != "r1:step4" || m.Detail != "amount 20, logged 2" || m.Run != "r1" || m.Tool != "refund" {
		t.Errorf("first mismatch %+v, want r1:step4 differs", m)
	}
	// r1:step6 is logged as failed, yet the system holds an effect under it.
	if m := got[1]; m.Kind != "differs" || m.Key != "r1:step6" || !strings.Contains(m.Detail, "failed") {
		t.Errorf("second mismatch %+v, want r1:step6 differs (failed in the log, done in the system)", m)
	}
	if m := got[2]; m.Kind != "unlogged" || m.Key != "r1:step8" || m.Run != "r1" || m.Tool != "refund" || m.Detail == "" {
		t.Errorf("third mismatch %+v, want r1:step8 unlogged", m)
	}

	clean := &unitReconciler{tool: "refund", keys: []agent.Key{"r1:step2", "r1:step4"}}
	if got, err := agent.Reconcile(ctx, "r1", log, clean); err != nil || len(got) != 0 {
		t.Errorf("a system that agrees: %+v, %v", got, err)
	}
	// Another run's log entry does not account for a key under this run.
	if got, err := agent.Reconcile(ctx, "r1", log, &unitReconciler{tool: "refund", keys: []agent.Key{"r2:step2"}}); err != nil || len(got) != 1 || got[0].Kind != "unlogged" {
		t.Errorf("a key logged only by run r2: %+v, %v; want unlogged", got, err)
	}

	errDown := errors.New("payments API down")
	if _, err := agent.Reconcile(ctx, "r1", log, &unitReconciler{tool: "refund", checkErr: errDown}); !errors.Is(err, errDown) || !strings.Contains(err.Error(), "r1:step2") {
		t.Errorf("Check failing: %v, want it wrapped with the key", err)
	}
	if _, err := agent.Reconcile(ctx, "r1", log, &unitReconciler{tool: "refund", keysErr: errDown}); !errors.Is(err, errDown) {
		t.Errorf("Keys failing: %v, want it wrapped", err)
	}
}

func TestToolLog(t *testing.T) {
	t2 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t3 := t2.Add(time.Second)
	cps := []checkpoint.Checkpoint{
		{RunID: "r1", Step: 3, Name: agent.StepTool, Journal: []checkpoint.CallRecord{
			{Name: "tool:lookup_order", At: t3, Result: json.RawMessage(`{"call_id":"c2","tool":"lookup_order","content":"unknown order","bytes":13,"is_error":true}`)},
		}},
		// A model step's journal is no tool call, whatever its calls are named.
		{RunID: "r1", Step: 1, Name: agent.StepModel, Journal: []checkpoint.CallRecord{
			{Name: "model", Result: json.RawMessage(`{"response":{}}`)},
			{Name: "tool:sneaky", Result: json.RawMessage(`not a record`)},
		}},
		{RunID: "r1", Step: 2, Name: agent.StepTool, Journal: []checkpoint.CallRecord{
			{Name: "lookup", Result: json.RawMessage(`not a record`)},
			{Name: "tool:refund", At: t2, Result: json.RawMessage(`{"call_id":"c1","tool":"refund","content":"pay_1","bytes":5,"replayed":true}`)},
		}},
		{RunID: "r1", Step: 4, Name: agent.StepTool}, // parked on an approval: no call
	}
	got, err := agent.ToolLog(cps)
	if err != nil {
		t.Fatal(err)
	}
	want := []agent.LogEntry{
		{Run: "r1", Step: 2, Tool: "refund", Key: "r1:step2", Content: "pay_1", At: t2},
		{Run: "r1", Step: 3, Tool: "lookup_order", Key: "r1:step3", Content: "unknown order", IsError: true, At: t3},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ToolLog =\n%+v\nwant\n%+v", got, want)
	}
	if got, err := agent.ToolLog(nil); err != nil || len(got) != 0 {
		t.Errorf("ToolLog(nil) = %+v, %v", got, err)
	}

	for _, bad := range []string{`not a record`, `{"content": 5}`, ``} {
		_, err := agent.ToolLog([]checkpoint.Checkpoint{{RunID: "r1", Step: 7, Name: agent.StepTool,
			Journal: []checkpoint.CallRecord{{Name: "tool:refund", Result: json.RawMessage(bad)}}}})
		if err == nil || !strings.Contains(err.Error(), "step 7") || !strings.Contains(err.Error(), "tool:refund") {
			t.Errorf("record %q: %v, want an error naming the step and the call", bad, err)
		}
	}
}

// The state is what checkpoints hold: its JSON names are persisted and
// must not drift.
func TestStateJSON(t *testing.T) {
	segment := &blob.Ref{Bucket: "DURABLE_BLOBS", Name: "r1/step8/history", Digest: "SHA-256=abc", Size: 4096}
	result := &blob.Ref{Bucket: "DURABLE_BLOBS", Name: "r1/step6/result-fetch", Digest: "SHA-256=def", Size: 100_000}
	call := model.ToolCall{ID: "c1", Name: "fetch", Args: json.RawMessage(`{"page":1}`)}
	st := agent.State{
		History: agent.History{Sealed: segment, SealedEntries: 4, Tail: []agent.Entry{
			{Role: model.RoleAssistant, Text: "fetching", ToolCalls: []model.ToolCall{call}},
			{Role: model.RoleUser, Results: []agent.Result{{CallID: "c1", Tool: "fetch", Content: "page 1:", Ref: result, Bytes: 100_000, IsError: true}}},
		}},
		Pending: []model.ToolCall{call},
		Done:    []agent.Result{{CallID: "c0", Tool: "fetch", Content: "x", Bytes: 1}},
		Usage:   agent.Usage{ModelCalls: 3, ToolCalls: 2, InputTokens: 300, OutputTokens: 150, Spend: 0.25},
		Budget:  agent.Budget{MaxSteps: 20, MaxTokens: 5000, MaxSpend: 2, OnReach: agent.Park, Group: "ops"},
		Base:    agent.Budget{MaxTokens: 2500},
		Granted: 1,
		Started: &agent.Fingerprint{Model: "m-1", Tools: "0123"},
		Notices: []string{"the model changed"},
		Answer:  "done",
	}
	doc, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back agent.State
	if err := json.Unmarshal(doc, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, st)
	}

	var tree any
	if err := json.Unmarshal(doc, &tree); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"history.sealed.name":                    "r1/step8/history",
		"history.sealed.digest":                  "SHA-256=abc",
		"history.sealed_entries":                 4.0,
		"history.tail.0.role":                    "assistant",
		"history.tail.0.tool_calls.0.name":       "fetch",
		"history.tail.0.tool_calls.0.args.page":  1.0,
		"history.tail.1.tool_results.0.call_id":  "c1",
		"history.tail.1.tool_results.0.tool":     "fetch",
		"history.tail.1.tool_results.0.content":  "page 1:",
		"history.tail.1.tool_results.0.ref.name": "r1/step6/result-fetch",
		"history.tail.1.tool_results.0.bytes":    100_000.0,
		"history.tail.1.tool_results.0.is_error": true,
		"pending.0.id":                           "c1",
		"done.0.call_id":                         "c0",
		"usage.model_calls":                      3.0,
		"usage.tool_calls":                       2.0,
		"usage.input_tokens":                     300.0,
		"usage.output_tokens":                    150.0,
		"usage.spend":                            0.25,
		"budget.max_steps":                       20.0,
		"budget.max_tokens":                      5000.0,
		"budget.max_spend":                       2.0,
		"budget.on_reach":                        "park",
		"budget.group":                           "ops",
		"base.max_tokens":                        2500.0,
		"granted":                                1.0,
		"started.model":                          "m-1",
		"started.tools_sha256":                   "0123",
		"notices.0":                              "the model changed",
		"answer":                                 "done",
	}
	for path, v := range want {
		if got := jsonAt(tree, path); !reflect.DeepEqual(got, v) {
			t.Errorf("%s = %#v, want %#v", path, got, v)
		}
	}

	// A fresh run's state leaves the optional parts out.
	doc, err = json.Marshal(agent.State{})
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != `{"history":{},"usage":{"model_calls":0,"tool_calls":0,"input_tokens":0,"output_tokens":0},"budget":{},"base":{}}` {
		t.Errorf("empty state encodes as %s", doc)
	}
}

// jsonAt walks a decoded JSON document by dotted path (object keys and
// array indexes); nil when the path does not exist.
func jsonAt(v any, path string) any {
	for _, p := range strings.Split(path, ".") {
		switch node := v.(type) {
		case map[string]any:
			v = node[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(node) {
				return nil
			}
			v = node[i]
		default:
			return nil
		}
	}
	return v
}
