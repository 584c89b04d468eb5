package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/steps"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// order is the state of the test workflows.
type order struct {
	Items int    `json:"items"`
	Total int    `json:"total"`
	Note  string `json:"note,omitempty"`
}

func noop(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
	return steps.Complete(st), nil
}

func testContext() *steps.Context {
	return steps.NewContext(steps.ContextConfig{RunID: "run-1", Workflow: "orders", Version: 1, Step: 1, Attempt: 1})
}

// execute runs one step of w and fails the test on error.
func execute[S any](t *testing.T, w *steps.Workflow[S], step, state string, first bool) steps.Result {
	t.Helper()
	res, err := w.Execute(context.Background(), testContext(), step, json.RawMessage(state), first)
	if err != nil {
		t.Fatalf("Execute(%s, %s): %v", step, state, err)
	}
	return res
}

func TestOutcomeKind(t *testing.T) {
	st := order{Items: 2}
	req := steps.ApprovalRequest{Payload: "p", Group: "g"}
	for _, tc := range []struct {
		name string
		got  steps.Kind
		want steps.Kind
		str  string
	}{
		{"Next", steps.Next(steps.New[order]("orders", 1).Ref("b"), st).Kind(), steps.KindNext, "next"},
		{"Complete", steps.Complete(st).Kind(), steps.KindComplete, "complete"},
		{"Fail", steps.Fail(st, "no").Kind(), steps.KindFail, "fail"},
		{"Park", steps.Park[order](req).Kind(), steps.KindWait, "wait"},
		{"zero Outcome", steps.Outcome[order]{}.Kind(), steps.Kind(0), "kind(0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Fatalf("Kind() = %v, want %v", tc.got, tc.want)
			}
			if s := tc.got.String(); s != tc.str {
				t.Fatalf("String() = %q, want %q", s, tc.str)
			}
		})
	}
}

// The outcome's fields are unexported: Execute is where they become visible,
// as the engine sees them.
func TestExecuteEncodesOutcome(t *testing.T) {
	st := order{Items: 2, Total: 20}
	req := steps.ApprovalRequest{Payload: map[string]int{"total": 20}, Group: "adjusters", TTL: time.Hour, OnExpiry: steps.ExpireRemind, Reminders: 2}
	const stateJSON = `{"items":2,"total":20}`
	var out steps.Outcome[order]
	w := steps.New[order]("orders", 1).
		Step("a", func(context.Context, *steps.Context, order) (steps.Outcome[order], error) { return out, nil }).
		Step("b", noop)
	for _, tc := range []struct {
		name string
		out  steps.Outcome[order]
		want steps.Result
	}{
		{"Next", steps.Next(w.Ref("b"), st), steps.Result{Kind: steps.KindNext, Next: "b", State: json.RawMessage(stateJSON)}},
		{"Complete", steps.Complete(st), steps.Result{Kind: steps.KindComplete, State: json.RawMessage(stateJSON)}},
		{"Fail", steps.Fail(st, "claim rejected"), steps.Result{Kind: steps.KindFail, State: json.RawMessage(stateJSON), Reason: "claim rejected"}},
		{"Park", steps.Park[order](req), steps.Result{Kind: steps.KindWait, Wait: &req}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out = tc.out
			got := execute(t, w, "a", `{}`, false)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Execute = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := steps.RetryPolicy{Attempts: 10, Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	for _, tc := range []struct {
		name    string
		policy  steps.RetryPolicy
		attempt int
		want    time.Duration
	}{
		{"first failure waits Backoff", p, 1, 100 * time.Millisecond},
		{"doubles", p, 2, 200 * time.Millisecond},
		{"doubles again", p, 3, 400 * time.Millisecond},
		{"doubles thrice", p, 4, 800 * time.Millisecond},
		{"capped", p, 5, time.Second},
		{"stays capped", p, 1000, time.Second},
		{"attempt 0 is the first", p, 0, 100 * time.Millisecond},
		{"negative attempt is the first", p, -3, 100 * time.Millisecond},
		{"Backoff above the cap", steps.RetryPolicy{Backoff: time.Hour, MaxBackoff: time.Minute}, 1, time.Minute},
		{"zero policy uses defaults", steps.RetryPolicy{}, 1, time.Second},
		{"default doubles", steps.RetryPolicy{}, 3, 4 * time.Second},
		{"default cap is 1m", steps.RetryPolicy{}, 10, time.Minute},
		{"negative fields use defaults", steps.RetryPolicy{Attempts: -1, Backoff: -time.Second, MaxBackoff: -time.Second}, 2, 2 * time.Second},
		{"only Backoff set", steps.RetryPolicy{Backoff: 10 * time.Second}, 4, time.Minute},
		{"only MaxBackoff set", steps.RetryPolicy{MaxBackoff: 3 * time.Second}, 3, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.Delay(tc.attempt); got != tc.want {
				t.Fatalf("%+v.Delay(%d) = %v, want %v", tc.policy, tc.attempt, got, tc.want)
			}
		})
	}
}

func TestRetryPolicyDelayUncapped(t *testing.T) {
	p := steps.RetryPolicy{Backoff: time.Second, MaxBackoff: math.MaxInt64}
	for attempt := 1; attempt <= 100; attempt++ {
		if d := p.Delay(attempt); d < time.Second {
			t.Fatalf("Delay(%d) = %v, want >= 1s", attempt, d)
		}
	}
}

func TestWorkflowRetry(t *testing.T) {
	w := steps.New[order]("orders", 1).
		Step("plain", noop).
		Step("custom", noop, steps.WithRetry(steps.RetryPolicy{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Second})).
		Step("partial", noop, steps.WithRetry(steps.RetryPolicy{Attempts: 8}))
	for _, tc := range []struct {
		step string
		want steps.RetryPolicy
	}{
		{"plain", steps.DefaultRetry},
		{"custom", steps.RetryPolicy{Attempts: 3, Backoff: time.Millisecond, MaxBackoff: time.Second}},
		{"partial", steps.RetryPolicy{Attempts: 8, Backoff: time.Second, MaxBackoff: time.Minute}},
		{"unknown", steps.DefaultRetry},
	} {
		if got := w.Retry(tc.step); got != tc.want {
			t.Errorf("Retry(%q) = %+v, want %+v", tc.step, got, tc.want)
		}
	}
	if want := (steps.RetryPolicy{Attempts: 5, Backoff: time.Second, MaxBackoff: time.Minute}); steps.DefaultRetry != want {
		t.Errorf("DefaultRetry = %+v, want the documented %+v", steps.DefaultRetry, want)
	}
}

func TestPermanent(t *testing.T) {
	cause := errors.New("card declined")
	perm := steps.Permanent(cause)
	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"nil", nil, false},
		{"plain", cause, false},
		{"wrapped plain", fmt.Errorf("pay: %w", cause), false},
		{"permanent", perm, true},
		{"wrapped permanent", fmt.Errorf("step pay: %w", perm), true},
		{"twice wrapped permanent", fmt.Errorf("run r: %w", fmt.Errorf("step pay: %w", perm)), true},
		{"joined", errors.Join(errors.New("other"), perm), true},
		{"permanent of wrapped", steps.Permanent(fmt.Errorf("pay: %w", cause)), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := steps.IsPermanent(tc.err); got != tc.permanent {
				t.Fatalf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.permanent)
			}
			if tc.permanent && !errors.Is(tc.err, cause) {
				t.Fatalf("errors.Is(%v, cause) = false: Permanent must keep the chain", tc.err)
			}
		})
	}
	var pe *steps.PermanentError
	if !errors.As(fmt.Errorf("x: %w", perm), &pe) || pe.Err != cause {
		t.Fatalf("errors.As did not find the PermanentError around the cause")
	}
	if got, want := perm.Error(), "permanent: card declined"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestPermanentNil(t *testing.T) {
	err := steps.Permanent(nil)
	if err != nil {
		t.Fatalf("Permanent(nil) = non-nil %T, want nil", err)
	}
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"claim", true},
		{"claim-v2", true},
		{"verify_policy", true},
		{"A9", true},
		{"x", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"claim.v2", false}, // a NATS subject token separator
		{"claim*", false},
		{"claim>", false},
		{"has space", false},
		{"slash/name", false},
		{"colon:name", false}, // ':' separates run, step and name in keys
		{"naïve", false},
		{"trailing\n", false},
	} {
		if got := steps.ValidName(tc.name); got != tc.ok {
			t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestWorkflowValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    *steps.Workflow[order]
		want []string // substrings of the error; none means valid
	}{
		{"valid", steps.New[order]("orders", 1).Step("a", noop).Step("b", noop), nil},
		{"bad workflow name", steps.New[order]("orders.v1", 1).Step("a", noop), []string{`workflow name "orders.v1"`}},
		{"empty workflow name", steps.New[order]("", 1).Step("a", noop), []string{`workflow name ""`}},
		{"version 0", steps.New[order]("orders", 0).Step("a", noop), []string{"version must be >= 1, got 0"}},
		{"negative version", steps.New[order]("orders", -2).Step("a", noop), []string{"version must be >= 1, got -2"}},
		{"bad step name", steps.New[order]("orders", 1).Step("a b", noop), []string{`step name "a b"`}},
		{"duplicate step", steps.New[order]("orders", 1).Step("a", noop).Step("b", noop).Step("a", noop), []string{`step "a" defined twice`}},
		{"nil fn", steps.New[order]("orders", 1).Step("a", nil), []string{`step "a" has no function`}},
		{"no steps", steps.New[order]("orders", 1), []string{"no steps"}},
		{"every error reported", steps.New[order]("", 0), []string{"workflow name", "version must be", "no steps"}},
		{"signal from groups", signalled("paid", "billing", "ops.eu"), nil},
		{"signal from any token", signalled("paid"), nil},
		{"signal from a bad group", signalled("paid", "bill ing"), []string{`signal paid: group "bill ing"`}},
		{"signal, bad name", signalled("pa.id", "billing"), []string{`signal name "pa.id"`}},
		{"Ref to a step", refTo("b", "b"), nil},
		{"Ref to no step", refTo("b", "c"), []string{`Ref("c") names no step`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestWorkflowAccessors(t *testing.T) {
	w := steps.New[order]("orders", 3).Step("price", noop).Step("pay", noop).Step("ship", noop)
	if w.Name() != "orders" || w.Version() != 3 || w.FirstStep() != "price" {
		t.Fatalf("Name, Version, FirstStep = %q, %d, %q", w.Name(), w.Version(), w.FirstStep())
	}
	names := w.StepNames()
	if want := []string{"price", "pay", "ship"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("StepNames() = %q, want %q", names, want)
	}
	names[0] = "changed"
	if w.StepNames()[0] != "price" {
		t.Fatalf("StepNames returned the workflow's own slice")
	}
	var _ steps.Definition = w
}

func TestWorkflowSignalGroups(t *testing.T) {
	w := steps.New[order]("orders", 1)
	w.Signal("cancel")
	w.Signal("paid", "billing")
	w.Signal("shipped", "carriers", "ops")
	w.Signal("paid", "finance", "billing")
	w.Step("a", noop)
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := w.SignalNames(), []string{"cancel", "paid", "shipped"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SignalNames() = %q, want %q (declared once)", got, want)
	}
	for name, want := range map[string][]string{"cancel": nil, "paid": {"billing", "finance"}, "shipped": {"carriers", "ops"}, "other": nil} {
		if got := w.SignalGroups(name); !reflect.DeepEqual(got, want) {
			t.Errorf("SignalGroups(%q) = %q, want %q", name, got, want)
		}
	}
	w.SignalGroups("paid")[0] = "changed"
	if w.SignalGroups("paid")[0] != "billing" {
		t.Fatalf("SignalGroups returned the workflow's own slice")
	}
}

func TestExecuteDecodesState(t *testing.T) {
	var got order
	w := steps.New[order]("orders", 1).Step("a", func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
		got = st
		st.Total = st.Items * 10
		return steps.Complete(st), nil
	})
	res := execute(t, w, "a", `{"items":3,"note":"hi"}`, false)
	if want := (order{Items: 3, Note: "hi"}); got != want {
		t.Fatalf("step got state %+v, want %+v", got, want)
	}
	if want := `{"items":3,"total":30,"note":"hi"}`; string(res.State) != want {
		t.Fatalf("Result.State = %s, want %s", res.State, want)
	}
}

func TestExecuteFirstStepUsesInit(t *testing.T) {
	type input struct {
		Count int `json:"count"`
	}
	var inits []string
	var got []order
	w := steps.New[order]("orders", 1).
		Init(func(raw json.RawMessage) (order, error) {
			inits = append(inits, string(raw))
			var in input
			if err := json.Unmarshal(raw, &in); err != nil {
				return order{}, err
			}
			return order{Items: in.Count, Note: "from init"}, nil
		}).
		Step("a", func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
			got = append(got, st)
			return steps.Complete(st), nil
		})

	execute(t, w, "a", `{"count":4}`, true)
	// Later steps get the checkpointed state as it is: Init is for the input only.
	execute(t, w, "a", `{"items":7}`, false)

	if want := []string{`{"count":4}`}; !reflect.DeepEqual(inits, want) {
		t.Fatalf("Init got %q, want %q", inits, want)
	}
	if want := []order{{Items: 4, Note: "from init"}, {Items: 7}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("steps got %+v, want %+v", got, want)
	}
}

func TestExecuteFirstStepDecodesInputByDefault(t *testing.T) {
	var got order
	w := steps.New[order]("orders", 1).Step("a", func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
		got = st
		return steps.Complete(st), nil
	})
	execute(t, w, "a", `{"items":5,"total":50}`, true)
	if want := (order{Items: 5, Total: 50}); got != want {
		t.Fatalf("first step got %+v, want %+v", got, want)
	}
}

func TestExecuteEmptyStateIsZero(t *testing.T) {
	for _, state := range []string{"", "null"} {
		for _, first := range []bool{true, false} {
			t.Run(fmt.Sprintf("%q first=%v", state, first), func(t *testing.T) {
				got := order{Items: -1}
				w := steps.New[order]("orders", 1).Step("a", func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
					got = st
					return steps.Complete(st), nil
				})
				res := execute(t, w, "a", state, first)
				if got != (order{}) {
					t.Fatalf("step got %+v, want the zero state", got)
				}
				if want := `{"items":0,"total":0}`; string(res.State) != want {
					t.Fatalf("Result.State = %s, want %s", res.State, want)
				}
			})
		}
	}
	// A nil RawMessage, as a run without input has.
	w := steps.New[order]("orders", 1).Step("a", noop)
	if _, err := w.Execute(context.Background(), testContext(), "a", nil, true); err != nil {
		t.Fatalf("Execute with nil input: %v", err)
	}
}

// unencodable cannot be written as JSON: a step that returns it has a bug.
type unencodable struct{ C chan int }

func TestExecutePermanentErrors(t *testing.T) {
	errInit := errors.New("bad input")
	called := false
	step := func(out steps.Outcome[order]) steps.StepFunc[order] {
		return func(context.Context, *steps.Context, order) (steps.Outcome[order], error) {
			called = true
			return out, nil
		}
	}
	wf := func(out steps.Outcome[order]) *steps.Workflow[order] {
		return steps.New[order]("orders", 1).Step("a", step(out)).Step("b", noop)
	}
	for _, tc := range []struct {
		name     string
		exec     func() (steps.Result, error)
		is       error // the sentinel in the chain, if any
		contains string
		ran      bool // whether the step function ran
	}{
		{
			name: "unknown step",
			exec: func() (steps.Result, error) {
				return wf(steps.Complete(order{})).Execute(context.Background(), testContext(), "nope", nil, false)
			},
			is: steps.ErrUnknownStep, contains: `"nope"`,
		},
		{
			name: "Next to an unknown step",
			exec: func() (steps.Result, error) {
				return wf(steps.Next(steps.New[order]("orders", 1).Ref("nowhere"), order{})).Execute(context.Background(), testContext(), "a", nil, false)
			},
			is: steps.ErrUnknownStep, contains: `"nowhere"`, ran: true,
		},
		{
			name: "Next to the zero Ref",
			exec: func() (steps.Result, error) {
				return wf(steps.Next(steps.Ref[order]{}, order{})).Execute(context.Background(), testContext(), "a", nil, false)
			},
			is: steps.ErrUnknownStep, contains: "names no step", ran: true,
		},
		{
			name: "empty Outcome",
			exec: func() (steps.Result, error) {
				return wf(steps.Outcome[order]{}).Execute(context.Background(), testContext(), "a", nil, false)
			},
			contains: "empty Outcome", ran: true,
		},
		{
			name: "Wait without a group",
			exec: func() (steps.Result, error) {
				return wf(steps.Park[order](steps.ApprovalRequest{Payload: "x"})).Execute(context.Background(), testContext(), "a", nil, false)
			},
			contains: "without a group", ran: true,
		},
		{
			name: "bad state JSON",
			exec: func() (steps.Result, error) {
				return wf(steps.Complete(order{})).Execute(context.Background(), testContext(), "a", json.RawMessage(`{"items":`), false)
			},
			is: steps.ErrBadState,
		},
		{
			name: "state of the wrong shape",
			exec: func() (steps.Result, error) {
				return wf(steps.Complete(order{})).Execute(context.Background(), testContext(), "a", json.RawMessage(`{"items":"three"}`), false)
			},
			is: steps.ErrBadState,
		},
		{
			name: "bad input on the first step",
			exec: func() (steps.Result, error) {
				return wf(steps.Complete(order{})).Execute(context.Background(), testContext(), "a", json.RawMessage(`[1,2]`), true)
			},
			is: steps.ErrBadState,
		},
		{
			name: "Init error",
			exec: func() (steps.Result, error) {
				w := wf(steps.Complete(order{})).Init(func(json.RawMessage) (order, error) { return order{}, errInit })
				return w.Execute(context.Background(), testContext(), "a", json.RawMessage(`{}`), true)
			},
			is: steps.ErrBadState, contains: "bad input",
		},
		{
			name: "state that does not encode",
			exec: func() (steps.Result, error) {
				w := steps.New[unencodable]("orders", 1).Step("a", func(context.Context, *steps.Context, unencodable) (steps.Outcome[unencodable], error) {
					called = true
					return steps.Complete(unencodable{C: make(chan int)}), nil
				})
				return w.Execute(context.Background(), testContext(), "a", nil, false)
			},
			contains: "encode state", ran: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called = false
			res, err := tc.exec()
			if err == nil {
				t.Fatalf("Execute = %+v, nil; want a permanent error", res)
			}
			if !steps.IsPermanent(err) {
				t.Fatalf("Execute error %q is not permanent", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Execute error %q does not wrap %q", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Fatalf("Execute error %q does not mention %q", err, tc.contains)
			}
			if called != tc.ran {
				t.Fatalf("step function ran = %v, want %v", called, tc.ran)
			}
			if !reflect.DeepEqual(res, steps.Result{}) {
				t.Fatalf("Execute returned a Result with its error: %+v", res)
			}
		})
	}
}

func TestExecuteInitErrorKeepsChain(t *testing.T) {
	errInit := errors.New("bad input")
	w := steps.New[order]("orders", 1).Step("a", noop).Init(func(json.RawMessage) (order, error) { return order{}, errInit })
	_, err := w.Execute(context.Background(), testContext(), "a", json.RawMessage(`{}`), true)
	if !errors.Is(err, errInit) {
		t.Fatalf("errors.Is(%q, errInit) = false", err)
	}
	_, err = w.Execute(context.Background(), testContext(), "a", json.RawMessage(`{`), false)
	var syn *json.SyntaxError
	if !errors.As(err, &syn) {
		t.Fatalf("errors.As(%q, *json.SyntaxError) = false", err)
	}
}

func TestExecuteWaitValidatesExpiryPolicy(t *testing.T) {
	for _, req := range []steps.ApprovalRequest{
		{Payload: "p", Group: "g", OnExpiry: "rejct"},
		{Payload: "p", Group: "g", OnExpiry: steps.ExpireEscalate},
		{Payload: "p", Group: "g", OnExpiry: steps.ExpireRemind, Reminders: -1},
	} {
		w := steps.New[order]("orders", 1).Step("a", func(context.Context, *steps.Context, order) (steps.Outcome[order], error) {
			return steps.Park[order](req), nil
		})
		if _, err := w.Execute(context.Background(), testContext(), "a", nil, false); !steps.IsPermanent(err) {
			t.Errorf("Execute(Wait %+v) error = %v, want a permanent error", req, err)
		}
	}
}

func TestExecuteStepErrorPassesThrough(t *testing.T) {
	errTransient := errors.New("model timed out")
	for _, tc := range []struct {
		name      string
		err       error
		permanent bool
	}{
		{"transient", errTransient, false},
		{"wrapped transient", fmt.Errorf("call model: %w", errTransient), false},
		{"permanent from the step", steps.Permanent(errTransient), true},
		{"context error", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := steps.New[order]("orders", 1).Step("a", func(context.Context, *steps.Context, order) (steps.Outcome[order], error) {
				// The outcome is ignored when the step returns an error.
				return steps.Complete(order{Items: 1}), tc.err
			})
			res, err := w.Execute(context.Background(), testContext(), "a", nil, false)
			if err != tc.err {
				t.Fatalf("Execute error = %v, want the step's own error %v, unchanged", err, tc.err)
			}
			if steps.IsPermanent(err) != tc.permanent {
				t.Fatalf("IsPermanent = %v, want %v", !tc.permanent, tc.permanent)
			}
			if !reflect.DeepEqual(res, steps.Result{}) {
				t.Fatalf("Execute returned a Result with the error: %+v", res)
			}
		})
	}
}

func TestExecutePassesContexts(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	sctx := steps.NewContext(steps.ContextConfig{RunID: "run-9", Step: 4})
	w := steps.New[order]("orders", 1).Step("a", func(c context.Context, s *steps.Context, st order) (steps.Outcome[order], error) {
		if c.Value(key{}) != "v" {
			return steps.Outcome[order]{}, errors.New("ctx not passed")
		}
		if s != sctx {
			return steps.Outcome[order]{}, errors.New("steps.Context not passed")
		}
		return steps.Complete(st), nil
	})
	if _, err := w.Execute(ctx, sctx, "a", nil, false); err != nil {
		t.Fatal(err)
	}
}

// versioned builds a valid workflow definition named name at version v.
func versioned(name string, v int) *steps.Workflow[order] {
	return steps.New[order](name, v).Step("a", noop)
}

func TestRegistry(t *testing.T) {
	r := steps.NewRegistry()
	if names := r.Names(); len(names) != 0 {
		t.Fatalf("empty registry Names() = %q", names)
	}
	if _, ok := r.Latest("claim"); ok {
		t.Fatalf("Latest on an empty registry found something")
	}

	for _, d := range []steps.Definition{versioned("claim", 2), versioned("triage", 1), versioned("claim", 1), versioned("agent", 7), versioned("claim", 10)} {
		if err := r.Register(d); err != nil {
			t.Fatalf("Register(%s v%d): %v", d.Name(), d.Version(), err)
		}
	}

	err := r.Register(versioned("claim", 2))
	if err == nil || !strings.Contains(err.Error(), "claim v2 registered twice") {
		t.Fatalf("second Register(claim v2) = %v, want a duplicate error", err)
	}
	if err := r.Register(steps.New[order]("bad.name", 1)); err == nil {
		t.Fatalf("Register of an invalid definition succeeded")
	}
	if _, ok := r.Lookup("bad.name", 1); ok {
		t.Fatalf("an invalid definition was registered")
	}

	for _, tc := range []struct {
		name    string
		version int
		ok      bool
	}{
		{"claim", 1, true}, {"claim", 2, true}, {"claim", 10, true}, {"claim", 3, false},
		{"triage", 1, true}, {"nope", 1, false},
	} {
		d, ok := r.Lookup(tc.name, tc.version)
		if ok != tc.ok {
			t.Errorf("Lookup(%s, %d) ok = %v, want %v", tc.name, tc.version, ok, tc.ok)
			continue
		}
		if ok && (d.Name() != tc.name || d.Version() != tc.version) {
			t.Errorf("Lookup(%s, %d) = %s v%d", tc.name, tc.version, d.Name(), d.Version())
		}
	}

	// 10 > 2: versions compare as numbers, not strings.
	if d, ok := r.Latest("claim"); !ok || d.Version() != 10 {
		t.Fatalf("Latest(claim) = %v, %v; want v10", d, ok)
	}
	if _, ok := r.Latest("nope"); ok {
		t.Fatalf("Latest(nope) found something")
	}
	if got, want := r.Names(), []string{"agent", "claim", "triage"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %q, want %q", got, want)
	}
	var all []string
	for _, d := range r.All() {
		all = append(all, fmt.Sprintf("%s/%d", d.Name(), d.Version()))
	}
	if want := []string{"agent/7", "claim/1", "claim/2", "claim/10", "triage/1"}; !reflect.DeepEqual(all, want) {
		t.Fatalf("All() = %q, want %q", all, want)
	}
}

func TestRegistryMustRegister(t *testing.T) {
	r := steps.NewRegistry()
	if got := r.MustRegister(versioned("a", 1), versioned("b", 1)); got != r {
		t.Fatalf("MustRegister did not return its registry")
	}
	for _, tc := range []struct {
		name string
		def  steps.Definition
	}{
		{"duplicate", versioned("a", 1)},
		{"invalid", steps.New[order]("c", 0).Step("a", noop)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if p == nil {
					t.Fatalf("MustRegister(%s) did not panic", tc.name)
				}
				if _, ok := p.(error); !ok {
					t.Fatalf("MustRegister panicked with %T, want the error", p)
				}
			}()
			r.MustRegister(tc.def)
		})
	}
}

func TestRegistryConcurrent(t *testing.T) {
	r := steps.NewRegistry()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 50; i++ {
			r.MustRegister(versioned("w", i))
		}
	}()
	for i := 0; i < 50; i++ {
		r.Lookup("w", i)
		r.Latest("w")
		r.Names()
		r.All()
	}
	<-done
	if d, _ := r.Latest("w"); d.Version() != 50 {
		t.Fatalf("Latest = v%d, want v50", d.Version())
	}
}

// A builder's definition error (Invalid) fails Validate and registration.
func TestInvalidFailsRegistration(t *testing.T) {
	wf := steps.New[struct{}]("built", 1).
		Invalid(nil).
		Invalid(errors.New("tool refund given twice")).
		Step("a", func(context.Context, *steps.Context, struct{}) (steps.Outcome[struct{}], error) {
			return steps.Complete(struct{}{}), nil
		})
	if err := wf.Validate(); err == nil || !strings.Contains(err.Error(), "tool refund given twice") {
		t.Fatalf("Validate: %v", err)
	}
	if err := steps.NewRegistry().Register(wf); err == nil {
		t.Fatal("registered an invalid workflow")
	}
}

// signalled is a workflow that declares signal name, sent by groups.
func signalled(name string, groups ...string) *steps.Workflow[order] {
	w := steps.New[order]("orders", 1)
	w.Signal(name, groups...)
	return w.Step("a", noop)
}

// refTo is a workflow with steps a and b whose step a goes to Ref(to);
// step is b's name.
func refTo(step, to string) *steps.Workflow[order] {
	w := steps.New[order]("orders", 1)
	next := w.Ref(to)
	return w.Step("a", func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
		return steps.Next(next, st), nil
	}).Step(step, noop)
}
