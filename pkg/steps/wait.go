package steps

import (
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Waits in one call. Each of Recv, Decision and RunChildren returns what
// the step waits for when it is there, or else the outcome that waits for
// it, or an error the step returns as it is, so that a step reads:
//
//	sig, wait, err := steps.Recv(s, reviewed, time.Hour)
//	if sig == nil {
//		return wait, err // parks until "reviewed" comes; fails the run after an hour
//	}
//
// The step runs again from its start when the wait ends, on the state it
// started with, and the same call then returns what came.

// Recv returns the oldest signal sig delivered to the run that no earlier
// step consumed (see Context.Signal). When none came it returns nil and
// the outcome that parks the run until one comes, for at most ttl (0:
// SignalWait's default). When the wait expired with none, it returns nil
// and an error that wraps ErrSignalExpired and Permanent: returned as it
// is, it sends the run to the dead letters (test it with errors.Is to do
// something else).
func Recv[S any](s *Context, sig SignalRef[S], ttl time.Duration) (*checkpoint.Signal, Outcome[S], error) {
	got, err := s.Signal(sig.name)
	switch {
	case err != nil:
		return nil, Outcome[S]{}, Permanent(err)
	case got == nil:
		return nil, AwaitSignal(sig, ttl), nil
	}
	return got, Outcome[S]{}, nil
}

// Decision returns the latest decision taken at this step on req's
// payload (see Context.Approval): approved or rejected, by a person, a
// system or req's expiry policy. When there is none it returns nil and
// the outcome that parks the run on req (Park). An error is req's: its
// payload does not encode. S is the workflow's state type, which Go
// cannot infer here:
//
//	d, wait, err := steps.Decision[Expense](s, req)
//	if d == nil {
//		return wait, err
//	}
//	if !d.Approved { ... }
func Decision[S any](s *Context, req ApprovalRequest) (*checkpoint.Approval, Outcome[S], error) {
	d, err := s.Approval(req)
	switch {
	case err != nil:
		return nil, Outcome[S]{}, Permanent(fmt.Errorf("approval request of %s: %w", s.IdempotencyKey(), err))
	case d == nil:
		return nil, Park[S](req), nil
	}
	return d, Outcome[S]{}, nil
}

// RunChildren returns how the child runs ended, in the order given, once
// they all have. Until then it returns nil and the outcome that commits
// state, starts them and waits for them (StartChildren), holding no
// worker; when they have all ended the step runs again on state, as the
// run's next step (a step n that starts children runs again as step n+1),
// and this call returns their results. With no children it returns an empty list at
// once. The step's children are those with the same ids (Child.ID, or
// the default derived from the run and the step), so a step runs one set
// of children; a second set is another step's.
func RunChildren[S any](s *Context, state S, children ...Child) ([]ChildResult, Outcome[S], error) {
	if len(children) == 0 {
		return []ChildResult{}, Outcome[S]{}, nil
	}
	if ended := s.cfg.Children; len(ended) == len(children) && s.Step() > 1 {
		same := true
		for i, c := range children {
			if ended[i].ID != childID(s.RunID(), s.Step()-1, i, c) {
				same = false
				break
			}
		}
		if same {
			return append([]ChildResult(nil), ended...), Outcome[S]{}, nil
		}
	}
	return nil, Outcome[S]{kind: KindChildren, next: s.StepName(), state: state, children: children}, nil
}
