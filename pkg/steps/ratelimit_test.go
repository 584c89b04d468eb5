package steps_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// tokens is a steps.RateLimits for tests of steps: it answers the waits
// it is given, in turn, and records what it was told.
type tokens struct {
	mu      sync.Mutex
	waits   []time.Duration // answered by Take, in turn; 0 once used up
	taken   []string
	slowed  []error
	slowFor time.Duration // answered by SlowDownOn for a *tooMany error
}

func (tk *tokens) Take(_ context.Context, resource string) (time.Duration, error) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.taken = append(tk.taken, resource)
	if len(tk.waits) == 0 {
		return 0, nil
	}
	w := tk.waits[0]
	tk.waits = tk.waits[1:]
	return w, nil
}

func (tk *tokens) SlowDownOn(_ context.Context, _ string, err error) time.Duration {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.slowed = append(tk.slowed, err)
	if errors.As(err, new(*tooMany)) {
		return tk.slowFor
	}
	return 0
}

type tooMany struct{}

func (*tooMany) Error() string { return "429 too many requests" }

func limitedStep(tk *tokens, j *journal) *steps.Context {
	return steps.NewContext(steps.ContextConfig{RunID: "r1", Workflow: "w", Step: 2, StepName: "ask", Attempt: 1, Recorder: j, RateLimits: tk})
}

// A call of a resource takes a token first; with none soon it is not
// made, and its error says how long to hand the step back for.
func TestCallTakesATokenOfItsResource(t *testing.T) {
	tk := &tokens{waits: []time.Duration{3 * time.Second}}
	j := newJournal()
	s := limitedStep(tk, j)
	calls := 0
	fn := func(ctx context.Context) (int, error) {
		calls++
		if got := steps.CallResource(ctx); got != "model" {
			t.Errorf("CallResource in the call = %q, want model", got)
		}
		return 7, nil
	}
	_, err := steps.Call(context.Background(), s, "ask", "q", fn, steps.Resource("model"))
	var te *steps.ThrottledError
	if !errors.As(err, &te) || !errors.Is(err, steps.ErrThrottled) || te.Wait != 3*time.Second || te.Resource != "model" || te.Err != nil {
		t.Fatalf("no token for 3s: err = %v, want a ThrottledError of model for 3s", err)
	}
	if calls != 0 {
		t.Fatalf("the call was made %d times without a token", calls)
	}
	// The same name may be called again in the attempt (it was not used).
	if v, err := steps.Call(context.Background(), s, "ask", "q", fn, steps.Resource("model")); v != 7 || err != nil {
		t.Fatalf("with a token: %d, %v", v, err)
	}
	// A retried step answered from the journal takes no token.
	tk.taken = nil
	retry := steps.NewContext(steps.ContextConfig{RunID: "r1", Step: 2, Attempt: 2, Recorder: j, Journal: j.records(), RateLimits: tk})
	if v, err := steps.Call(context.Background(), retry, "ask", "q", fn, steps.Resource("model")); v != 7 || err != nil || len(tk.taken) != 0 || calls != 1 {
		t.Fatalf("replayed call: %d, %v, tokens taken %v, calls %d", v, err, tk.taken, calls)
	}
}

// A rate-limit answer slows the resource down and hands the step back;
// any other error goes to the step as it is.
func TestCallRateLimitedSlowsDown(t *testing.T) {
	tk := &tokens{slowFor: 2 * time.Second}
	s := limitedStep(tk, newJournal())
	limited := &tooMany{}
	_, err := steps.Call(context.Background(), s, "ask", "q", func(context.Context) (int, error) { return 0, limited }, steps.Resource("model"))
	var te *steps.ThrottledError
	if !errors.As(err, &te) || te.Wait != 2*time.Second || !errors.Is(err, limited) {
		t.Fatalf("a 429: err = %v, want a ThrottledError for 2s wrapping it", err)
	}
	other := errors.New("boom")
	if _, err := steps.Call(context.Background(), s, "ask", "q", func(context.Context) (int, error) { return 0, other }, steps.Resource("model")); err != other {
		t.Fatalf("another error: %v, want it as it is", err)
	}
	if len(tk.slowed) != 2 {
		t.Fatalf("SlowDownOn told of %d errors, want 2", len(tk.slowed))
	}
}

// Without RateLimits, or without a resource, a call takes no token.
func TestCallResourceWithoutLimits(t *testing.T) {
	s := steps.NewContext(steps.ContextConfig{RunID: "r1", Step: 1, Attempt: 1})
	v, err := steps.Call(context.Background(), s, "ask", "q", func(ctx context.Context) (int, error) {
		if r := steps.CallResource(ctx); r != "" {
			t.Errorf("CallResource with no RateLimits = %q", r)
		}
		return 1, nil
	}, steps.Resource("model"))
	if v != 1 || err != nil {
		t.Fatalf("%d, %v", v, err)
	}
	tk := &tokens{waits: []time.Duration{time.Hour}}
	if _, err := steps.Call(context.Background(), limitedStep(tk, newJournal()), "plain", "q", func(context.Context) (int, error) { return 1, nil }); err != nil || len(tk.taken) != 0 {
		t.Fatalf("a call with no resource: %v, took %v", err, tk.taken)
	}
}
