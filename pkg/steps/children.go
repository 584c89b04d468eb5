package steps

import (
	"encoding/json"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Child is a child run a step starts: a run of Workflow (the newest
// version registered) on Input, with id ID. The default ID is
// "<run>-s<n>-<i>" for the i-th child of step n: derived from the parent
// and the step, so a redelivery never starts a second child.
type Child struct {
	Workflow string
	Input    any
	ID       string
}

// StartChildren commits state and starts the child runs, then the run
// waits, holding no worker, until every child has ended (completed,
// failed, cancelled or dead); then step next runs on state and reads
// their outcomes with ChildResults. (RunChildren does both in one step.) Cancelling the run cancels its
// children. A child that can't start (its input does not match its
// workflow's schema, or no worker registered its workflow) sends the run
// to the dead letters with the reason; redrive it once that is fixed. At
// most checkpoint.MaxBranches children; with none, next runs at once.
func StartChildren[S any](next Ref[S], state S, children ...Child) Outcome[S] {
	return Outcome[S]{kind: KindChildren, next: next.name, nextOf: next.w, state: state, children: children}
}

// ChildResult is how a child run ended.
type ChildResult struct {
	ID       string            `json:"run_id"`
	Workflow string            `json:"workflow"`
	Status   checkpoint.Status `json:"status"`
	Error    string            `json:"error,omitempty"`
	// State is the child's last committed state (nil if it committed
	// none, as a child cancelled before its first step).
	State json.RawMessage `json:"state,omitempty"`
}

// ChildResults returns how the child runs the step before started ended,
// in the order they were started: none when it started none (or did not
// start children).
func ChildResults(s *Context) ([]ChildResult, error) {
	return append([]ChildResult(nil), s.cfg.Children...), nil
}

// childRuns checks and encodes the children step n of run starts.
func (w *Workflow[S]) childRuns(s *Context, step string, children []Child) ([]checkpoint.Child, error) {
	if len(children) > checkpoint.MaxBranches {
		return nil, fmt.Errorf("workflow %s step %s: a step starts at most %d child runs, not %d", w.name, step, checkpoint.MaxBranches, len(children))
	}
	out := make([]checkpoint.Child, len(children))
	seen := map[string]bool{}
	for i, c := range children {
		id := childID(s.RunID(), s.Step(), i, c)
		if !checkpoint.ValidID(id) {
			return nil, fmt.Errorf("workflow %s step %s: child %d: id %q: use 1-128 letters, digits, '-' or '_'", w.name, step, i+1, id)
		}
		if seen[id] || id == s.RunID() {
			return nil, fmt.Errorf("workflow %s step %s: child %d: id %q is used twice", w.name, step, i+1, id)
		}
		seen[id] = true
		if !ValidName(c.Workflow) {
			return nil, fmt.Errorf("workflow %s step %s: child %d: workflow %q", w.name, step, i+1, c.Workflow)
		}
		in, err := json.Marshal(c.Input)
		if err != nil {
			return nil, fmt.Errorf("workflow %s step %s: encode the input of child %d: %w", w.name, step, i+1, err)
		}
		if string(in) == "null" {
			in = json.RawMessage(`{}`)
		}
		out[i] = checkpoint.Child{ID: id, Workflow: c.Workflow, Input: in}
	}
	return out, nil
}

// childID is the id of child i (from 0) that step n of run starts.
func childID(run string, n, i int, c Child) string {
	if c.ID != "" {
		return c.ID
	}
	return fmt.Sprintf("%s-s%d-%d", run, n, i+1)
}
