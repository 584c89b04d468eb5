// Package claimsbatch is the reference workflow of child runs: it starts
// N claim runs, <run>-1 … <run>-N, waits for all of them without holding
// a worker (each waits for its adjuster), and keeps the sum of what they
// paid.
package claimsbatch

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/durable-run/durable/internal/demo/examples/claim"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// Name and Version of the workflow.
const (
	Name    = "claims-batch"
	Version = 1
	// DefaultAmount of each claim when the input names none.
	DefaultAmount = 1840
)

// Input of a run: {"count": N, "amount": A}.
type Input struct {
	Count  int   `json:"count"`
	Amount int64 `json:"amount"`
}

// State of a run: Paid sums what the completed children paid; Ended
// counts the children by how they ended.
type State struct {
	Count  int            `json:"count"`
	Amount int64          `json:"amount"`
	Paid   int64          `json:"paid"`
	Ended  map[string]int `json:"ended,omitempty"`
}

// New returns the claims-batch workflow.
func New() *steps.Workflow[State] {
	w := steps.New[State](Name, Version).
		Init(initState).
		InputSchema(`{"type": "object", "additionalProperties": false, "required": ["count"], "properties": {
			"count": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "child claims to start"},
			"amount": {"type": "integer", "minimum": 1, "description": "amount of each claim, default 1840"}}}`)
	collectRef := w.Ref("collect")
	w.Step("start", func(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
		return start(s, collectRef, st)
	})
	w.Step("collect", collect)
	return w
}

func initState(raw json.RawMessage) (State, error) {
	var in Input
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return State{}, err
		}
	}
	st := State{Count: in.Count, Amount: in.Amount}
	if st.Amount == 0 {
		st.Amount = DefaultAmount
	}
	return st, nil
}

func start(s *steps.Context, collect steps.Ref[State], st State) (steps.Outcome[State], error) {
	if st.Count < 1 || st.Count > checkpoint.MaxBranches {
		return steps.Fail(st, fmt.Sprintf("count must be 1 to %d, got %d", checkpoint.MaxBranches, st.Count)), nil
	}
	if st.Amount < 0 {
		return steps.Fail(st, fmt.Sprintf("amount must not be negative, got %d", st.Amount)), nil
	}
	children := make([]steps.Child, st.Count)
	for i := range children {
		children[i] = steps.Child{Workflow: claim.Name, ID: fmt.Sprintf("%s-%d", s.RunID(), i+1), Input: claim.Input{Amount: st.Amount}}
	}
	return steps.StartChildren(collect, st, children...), nil
}

func collect(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	results, err := steps.ChildResults(s)
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	st.Ended = map[string]int{}
	for _, r := range results {
		st.Ended[string(r.Status)]++
		if r.Status != checkpoint.StatusCompleted || len(r.State) == 0 {
			continue
		}
		var c claim.State
		if err := json.Unmarshal(r.State, &c); err != nil {
			return steps.Outcome[State]{}, steps.Permanent(fmt.Errorf("state of child %s: %w", r.ID, err))
		}
		if c.PaymentID != "" {
			st.Paid += c.Amount
		}
	}
	return steps.Complete(st), nil
}
