package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Branch is one branch of a fan-out: a branch step and the input it runs
// on. Make one with BranchRef.With.
type Branch struct {
	step  string
	owner any
	input any
}

// FanOut runs branches in parallel, each on any worker, then step join on
// state; the join reads the branches' outputs with BranchRef.Outputs. The
// fan-out is committed with state before any branch runs; branch i of the
// fan-out committed at step n is checkpointed on its own and has the
// idempotency key "<run>:step<n+1>.<i>"; the join is step n+1 and runs
// once, after every branch is checkpointed. At most
// checkpoint.MaxBranches branches; none goes straight to the join (with no
// outputs). A branch that fails for good (its retries used up, or a
// permanent error) sends the run to the dead letters naming the branch;
// the others are not interrupted, and a redrive runs the branches that have
// no checkpoint, then the join.
func FanOut[S any](join Ref[S], state S, branches ...Branch) Outcome[S] {
	return Outcome[S]{kind: KindFanOut, next: join.name, nextOf: join.w, state: state, branches: branches}
}

// BranchRef is a branch step that runs on input I and returns output O
// (both JSON), added with AddBranch: With makes the branches of a
// fan-out, Outputs reads what they returned in the join.
type BranchRef[I, O any] struct {
	name  string
	owner any
}

// Name is the branch step's name.
func (b BranchRef[I, O]) Name() string { return b.name }

// AddBranch adds to w a branch step: a step that only runs as a branch of
// a fan-out, fn on the branch's input. Inside, Call and Effect work as in
// a step, under the branch's own journal and key. A branch cannot fan out,
// park or sleep; a returned error retries it by its policy. Branch and step
// names share one namespace. (A function, not a method of Workflow: Go
// methods take no type parameters of their own.)
func AddBranch[S, I, O any](w *Workflow[S], name string, fn func(ctx context.Context, s *Context, in I) (O, error), opts ...StepOption) BranchRef[I, O] {
	var run func(ctx context.Context, s *Context, input json.RawMessage) (json.RawMessage, error)
	if fn == nil {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: branch %q has no function", w.name, name))
	} else {
		run = branchFunc(fn)
	}
	w.add(name, stepDef[S]{branch: run}, opts)
	return BranchRef[I, O]{name: name, owner: w}
}

// branchFunc is fn on JSON input and output.
func branchFunc[I, O any](fn func(ctx context.Context, s *Context, in I) (O, error)) func(ctx context.Context, s *Context, input json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, s *Context, input json.RawMessage) (json.RawMessage, error) {
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
	}
}

// With is a branch of a fan-out that runs b on in.
func (b BranchRef[I, O]) With(in I) Branch { return Branch{step: b.name, owner: b.owner, input: in} }

// ErrNotAJoin: Outputs was called in a step that does not follow a
// fan-out.
var ErrNotAJoin = errors.New("step does not join a fan-out")

// Outputs returns, in a join step, the outputs of the fan-out's branches
// that ran b, in branch order (the branches of other branch steps are
// left out: read them with their own BranchRef).
func (b BranchRef[I, O]) Outputs(s *Context) ([]O, error) {
	if s.cfg.BranchOutputs == nil {
		return nil, fmt.Errorf("%s: %w", s.IdempotencyKey(), ErrNotAJoin)
	}
	out := make([]O, 0, len(s.cfg.BranchOutputs))
	for i, raw := range s.cfg.BranchOutputs {
		if i < len(s.cfg.BranchSteps) && s.cfg.BranchSteps[i] != b.name {
			continue
		}
		var o O
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &o); err != nil {
				return nil, fmt.Errorf("output of branch %d (%s) of %s: %w", i+1, b.name, s.IdempotencyKey(), err)
			}
		}
		out = append(out, o)
	}
	return out, nil
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

// fanOut checks and encodes the branches of a fan-out that step returned.
func (w *Workflow[S]) fanOut(step string, branches []Branch) ([]checkpoint.Branch, error) {
	if len(branches) > checkpoint.MaxBranches {
		return nil, fmt.Errorf("workflow %s step %s: a fan-out has at most %d branches, not %d", w.name, step, checkpoint.MaxBranches, len(branches))
	}
	out := make([]checkpoint.Branch, len(branches))
	for i, b := range branches {
		if d, ok := w.steps[b.step]; !ok || d.branch == nil || b.owner != any(w) {
			return nil, fmt.Errorf("workflow %s step %s: branch %d runs %q, which is not a branch step of the workflow (take it from AddBranch on it): %w", w.name, step, i+1, b.step, ErrUnknownStep)
		}
		in, err := json.Marshal(b.input)
		if err != nil {
			return nil, fmt.Errorf("workflow %s step %s: encode the input of branch %d: %w", w.name, step, i+1, err)
		}
		out[i] = checkpoint.Branch{Step: b.step, Input: in}
	}
	return out, nil
}
