package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Branch is one branch of a fan-out: the branch step that runs it (added
// with Workflow.Branch) and the input it runs on, which must encode to
// JSON.
type Branch struct {
	Step  string
	Input any
}

// FanOut runs branches in parallel, each on any worker, then the step
// named join on state with the branches' outputs (BranchOutputs, in
// branch order). The fan-out is committed with state before any branch
// runs; branch i of the fan-out committed at step n is checkpointed on
// its own and has the idempotency key "<run>:step<n+1>.<i>"; the join is
// step n+1 and runs once, after every branch is checkpointed. At most
// checkpoint.MaxBranches branches; none goes straight to the join (with no
// outputs). A branch that fails for good (its
// retries used up, or a permanent error) sends the run to the dead
// letters naming the branch; the others are not interrupted, and a
// redrive runs the branches that have no checkpoint, then the join.
func FanOut[S any](join string, state S, branches ...Branch) Outcome[S] {
	return Outcome[S]{kind: KindFanOut, next: join, state: state, branches: branches}
}

// BranchStep is the body of a branch step, built with BranchFunc.
type BranchStep struct {
	run func(ctx context.Context, s *Context, input json.RawMessage) (json.RawMessage, error)
}

// BranchFunc makes a branch step of fn, which runs on input I and returns
// output O (both JSON). Inside, Call and Effect work as in a step, under
// the branch's own journal and key. A branch cannot fan out, park or
// sleep; a returned error retries it by its policy.
func BranchFunc[I, O any](fn func(ctx context.Context, s *Context, in I) (O, error)) BranchStep {
	return BranchStep{run: func(ctx context.Context, s *Context, input json.RawMessage) (json.RawMessage, error) {
		var in I
		if len(input) > 0 && string(input) != "null" {
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, Permanent(fmt.Errorf("branch %s: %w: %w", s.StepName(), ErrBadState, err))
			}
		}
		out, err := fn(ctx, s, in)
		if err != nil {
			return nil, err
		}
		enc, err := json.Marshal(out)
		if err != nil {
			return nil, Permanent(fmt.Errorf("branch %s: encode output: %w", s.StepName(), err))
		}
		return enc, nil
	}}
}

// ErrNotAJoin: BranchOutputs was called in a step that does not follow a
// fan-out.
var ErrNotAJoin = errors.New("step does not join a fan-out")

// BranchOutputs returns the outputs of the branches a join step follows,
// decoded as T, in branch order.
func BranchOutputs[T any](s *Context) ([]T, error) {
	if s.cfg.BranchOutputs == nil {
		return nil, fmt.Errorf("%s: %w", s.IdempotencyKey(), ErrNotAJoin)
	}
	out := make([]T, len(s.cfg.BranchOutputs))
	for i, raw := range s.cfg.BranchOutputs {
		if len(raw) == 0 {
			continue
		}
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("output of branch %d of %s: %w", i+1, s.IdempotencyKey(), err)
		}
	}
	return out, nil
}

// Branch adds a branch step: a step that only runs as a branch of a
// fan-out. Branch and step names share one namespace.
func (w *Workflow[S]) Branch(name string, fn BranchStep, opts ...StepOption) *Workflow[S] {
	if fn.run == nil {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: branch %q has no function (use steps.BranchFunc)", w.name, name))
	}
	w.add(name, stepDef[S]{branch: fn.run}, opts)
	return w
}

// ExecuteBranch runs branch step name on its encoded input and returns
// its encoded output. The engine calls it; workflow authors don't need to.
func (w *Workflow[S]) ExecuteBranch(ctx context.Context, s *Context, name string, input json.RawMessage) (json.RawMessage, error) {
	d, ok := w.steps[name]
	if !ok || d.branch == nil {
		return nil, Permanent(fmt.Errorf("workflow %s v%d: %w: no branch step %q", w.name, w.version, ErrUnknownStep, name))
	}
	return d.branch(ctx, s, input)
}

// fanOut checks and encodes the branches of a fan-out to join.
func (w *Workflow[S]) fanOut(step, join string, branches []Branch) ([]checkpoint.Branch, error) {
	if d, ok := w.steps[join]; !ok || d.branch != nil {
		return nil, fmt.Errorf("workflow %s step %s: fan-out joins at %q, which is not a step of the workflow: %w", w.name, step, join, ErrUnknownStep)
	}
	if len(branches) > checkpoint.MaxBranches {
		return nil, fmt.Errorf("workflow %s step %s: a fan-out has at most %d branches, not %d", w.name, step, checkpoint.MaxBranches, len(branches))
	}
	out := make([]checkpoint.Branch, len(branches))
	for i, b := range branches {
		if d, ok := w.steps[b.Step]; !ok || d.branch == nil {
			return nil, fmt.Errorf("workflow %s step %s: branch %d runs %q, which is not a branch step (add it with Workflow.Branch): %w", w.name, step, i+1, b.Step, ErrUnknownStep)
		}
		in, err := json.Marshal(b.Input)
		if err != nil {
			return nil, fmt.Errorf("workflow %s step %s: encode the input of branch %d: %w", w.name, step, i+1, err)
		}
		out[i] = checkpoint.Branch{Step: b.Step, Input: in}
	}
	return out, nil
}
