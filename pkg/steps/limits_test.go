package steps_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/durable-run/durable/pkg/steps"
)

type tenantIn struct {
	Tenant string `json:"tenant"`
	Plan   *struct {
		Tier int `json:"tier"`
	} `json:"plan"`
}

// A FairnessKey or Priority function that panics (a nil pointer in the
// user's code) must not take the worker down: the run gets the key and
// priority of a run whose input does not decode ("" and 0). Before, the
// panic reached the worker's goroutine and killed the process, and the
// run's redelivery killed the next one.
func TestFairnessKeyAndPriorityThatPanic(t *testing.T) {
	wf := steps.New[tenantIn]("t", 1).
		FairnessKey(func(in tenantIn) string { return in.Tenant + string(rune(in.Plan.Tier)) }).
		Priority(func(in tenantIn) int { return in.Plan.Tier })
	wf.Step("s", func(_ context.Context, _ *steps.Context, in tenantIn) (steps.Outcome[tenantIn], error) {
		return steps.Complete(in), nil
	})
	in := json.RawMessage(`{"tenant":"boom"}`) // no plan: a nil pointer
	if key := wf.FairnessKeyOf(in); key != "" {
		t.Errorf("key %q, want \"\" for a key function that panicked", key)
	}
	if prio := wf.PriorityOf(in); prio != 0 {
		t.Errorf("priority %d, want 0 for a priority function that panicked", prio)
	}
	ok := json.RawMessage(`{"tenant":"a","plan":{"tier":2}}`)
	if key, prio := wf.FairnessKeyOf(ok), wf.PriorityOf(ok); key != "a\x02" || prio != 2 {
		t.Errorf("key %q priority %d, want \"a\\x02\" and 2", key, prio)
	}
	// nil functions set nothing.
	none := steps.New[tenantIn]("n", 1).FairnessKey(nil).Priority(nil)
	if key, prio := none.FairnessKeyOf(ok), none.PriorityOf(ok); key != "" || prio != 0 {
		t.Errorf("nil functions: key %q priority %d, want \"\" and 0", key, prio)
	}
}
