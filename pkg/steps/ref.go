package steps

import (
	"fmt"
	"slices"
)

// Ref names a step of a workflow over state S: what Next, SleepUntil,
// FanOut and StartChildren take. Workflow.Ref gives it out, and
// registering the workflow fails when a Ref names no step, so that a typo
// in a step's target stops the worker at its start, not a run days later:
//
//	w := steps.New[Doc]("review", 1)
//	publish := w.Ref("publish") // registration fails if no step "publish" is added
//	w.Step("draft", func(ctx context.Context, s *steps.Context, d Doc) (steps.Outcome[Doc], error) {
//		return steps.Next(publish, d), nil
//	}).Step("publish", publishFn)
//
// The zero Ref names no step: a step that returns an outcome to one sends
// the run to the dead letters.
type Ref[S any] struct {
	name string
	w    *Workflow[S]
}

// Name is the step's name, as runs and `durable runs show` name it.
func (r Ref[S]) Name() string { return r.name }

// Ref returns the Ref of step name, added before or after: when the
// workflow is registered (Validate), a Ref that names no step (or a branch
// step) is an error naming it. Take Refs while building the workflow: one
// taken in a running step is not checked.
func (w *Workflow[S]) Ref(name string) Ref[S] {
	if !slices.Contains(w.refs, name) {
		w.refs = append(w.refs, name)
	}
	return Ref[S]{name: name, w: w}
}

// SignalRef names a signal a workflow over state S declared
// (Workflow.Signal): what AwaitSignal and Recv take.
type SignalRef[S any] struct {
	name string
	w    *Workflow[S]
}

// Name is the signal's name, the one `durable signal RUN NAME` and the
// approver's API take.
func (r SignalRef[S]) Name() string { return r.name }

// Signal declares the signal name, which the workflow's steps wait for
// (Recv, AwaitSignal), and returns its SignalRef. A signal of another name
// is refused when it is sent. With no groups any valid token may send it
// through the approver's API; with groups only tokens of one of them (and
// of group operators, who may send any signal), others get 403. Signed
// events of the systems the approver knows, and `durable signal`, which
// needs the store, are not limited by groups. Declaring name again adds
// groups.
//
//	delivered := w.Signal("delivered", "carriers")
func (w *Workflow[S]) Signal(name string, groups ...string) SignalRef[S] {
	w.declareSignal(name)
	for _, g := range groups {
		if !groupRE.MatchString(g) {
			w.errs = append(w.errs, fmt.Errorf("workflow %s: signal %s: group %q: use 1-64 letters, digits, '.', '_' or '-' (as token groups)", w.name, name, g))
			continue
		}
		if w.signalGroups == nil {
			w.signalGroups = map[string][]string{}
		}
		if !slices.Contains(w.signalGroups[name], g) {
			w.signalGroups[name] = append(w.signalGroups[name], g)
		}
	}
	return SignalRef[S]{name: name, w: w}
}

// checkRefs reports the Refs (Workflow.Ref) that name no step of w.
func (w *Workflow[S]) checkRefs() []error {
	var errs []error
	for _, name := range w.refs {
		d, ok := w.steps[name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("workflow %s: Ref(%q) names no step (steps: %v)", w.name, name, w.order))
		case d.branch != nil:
			errs = append(errs, fmt.Errorf("workflow %s: Ref(%q) names a branch step: a fan-out runs it (BranchRef.With), Next cannot", w.name, name))
		}
	}
	return errs
}

// target checks the step an outcome of step goes to: set, of w, a step.
func (w *Workflow[S]) target(step, next string, of *Workflow[S]) error {
	switch {
	case next == "":
		return fmt.Errorf("workflow %s step %s: %w: the outcome names no step (a zero steps.Ref: take it from Workflow.Step or Workflow.Ref)", w.name, step, ErrUnknownStep)
	case of != nil && of != w:
		return fmt.Errorf("workflow %s step %s: %w: %q is a Ref of workflow %s v%d", w.name, step, ErrUnknownStep, next, of.name, of.version)
	}
	if d, ok := w.steps[next]; !ok || d.fn == nil {
		return fmt.Errorf("workflow %s step %s: next %w %q", w.name, step, ErrUnknownStep, next)
	}
	return nil
}
