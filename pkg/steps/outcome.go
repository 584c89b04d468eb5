package steps

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Kind says what a step decided.
type Kind int

const (
	// KindNext: go to a named step with the new state.
	KindNext Kind = iota + 1
	// KindComplete: the run completed with this state.
	KindComplete
	// KindFail: the run failed for a business reason (no retry).
	KindFail
	// KindWait: park the run until a person or system decides, or a
	// signal comes.
	KindWait
	// KindSleep: commit the state, then go to a named step at a given time.
	KindSleep
	// KindFanOut: commit the state, run branches in parallel, then the
	// join step with their outputs.
	KindFanOut
	// KindChildren: commit the state, start child runs, wait until they
	// have all ended, then go to a named step.
	KindChildren
)

func (k Kind) String() string {
	switch k {
	case KindNext:
		return "next"
	case KindComplete:
		return "complete"
	case KindFail:
		return "fail"
	case KindWait:
		return "wait"
	case KindSleep:
		return "sleep"
	case KindFanOut:
		return "fan-out"
	case KindChildren:
		return "children"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Outcome is what a step returns: where the run goes next and with which
// state. Build one with Next, Complete, Fail, Park, SleepUntil, FanOut,
// StartChildren or AwaitSignal; Recv, Decision and RunChildren return the
// one that waits.
type Outcome[S any] struct {
	kind Kind
	// next is the step the run goes to, of the workflow nextOf (nil: the
	// step that returns the outcome named it, as RunChildren does).
	next     string
	nextOf   *Workflow[S]
	state    S
	reason   string
	wait     *ApprovalRequest
	until    time.Time
	branches []Branch
	children []Child
	signal   *SignalWait
}

// Next moves the run to step with state. The step may be chosen at run
// time (an agent loop whose next step the model picks: a map of Refs).
func Next[S any](step Ref[S], state S) Outcome[S] {
	return Outcome[S]{kind: KindNext, next: step.name, nextOf: step.w, state: state}
}

// Complete ends the run successfully with state.
func Complete[S any](state S) Outcome[S] { return Outcome[S]{kind: KindComplete, state: state} }

// Fail ends the run as failed, for a reason that retrying won't change (a
// rejected claim). state is recorded for inspection. For errors that might
// pass, return an error instead: the step is retried by its policy.
func Fail[S any](state S, reason string) Outcome[S] {
	return Outcome[S]{kind: KindFail, state: state, reason: reason}
}

// Park parks the run until req is decided, holding no worker. When it is,
// the same step runs again from its start, on the state it started with,
// and finds the decision through Context.Approval. S is the workflow's
// state type, which Go cannot infer here: steps.Park[Expense](req).
func Park[S any](req ApprovalRequest) Outcome[S] {
	return Outcome[S]{kind: KindWait, wait: &req}
}

// SleepUntil commits state and runs step next at time until, on any
// worker: a durable timer. The run holds nothing while it sleeps; the
// scheduler wakes it.
func SleepUntil[S any](next Ref[S], state S, until time.Time) Outcome[S] {
	return Outcome[S]{kind: KindSleep, next: next.name, nextOf: next.w, state: state, until: until}
}

// Kind reports what the outcome decided.
func (o Outcome[S]) Kind() Kind { return o.kind }

// Result is an outcome with its state encoded, as the engine persists it.
type Result struct {
	Kind   Kind
	Next   string
	State  json.RawMessage
	Reason string
	Wait   *ApprovalRequest
	// Until is when a sleeping run wakes.
	Until time.Time
	// Branches of a fan-out, their inputs encoded; Next is the join.
	Branches []checkpoint.Branch
	// Children a step starts; Next runs once they have all ended.
	Children []checkpoint.Child
	// Signal is set, instead of Wait, when a step waits for a signal.
	Signal *SignalWait
}

// Expiry policies for approvals nobody answers.
const (
	ExpireReject   = "reject"
	ExpireEscalate = "escalate"
	ExpireRemind   = "remind"
)

// ApprovalRequest is what a parked run asks for.
type ApprovalRequest struct {
	// Payload is what the approver sees; it must encode to JSON. Its SHA-256
	// is what an approval names.
	Payload any
	// Group may decide. Required.
	Group string
	// TTL until the expiry policy applies. Default 72h.
	TTL time.Duration
	// OnExpiry: ExpireReject (default), ExpireEscalate or ExpireRemind.
	OnExpiry string
	// EscalateTo is the group that gets the request when OnExpiry is ExpireEscalate.
	EscalateTo string
	// Reminders before rejecting, when OnExpiry is ExpireRemind.
	Reminders int
}

// RetryPolicy says how often a step that returns an error is tried again.
type RetryPolicy struct {
	// Attempts in total, first included. Default 5.
	Attempts int
	// Backoff before the second attempt; doubled each time. Default 1s.
	Backoff time.Duration
	// MaxBackoff caps the backoff. Default 1m.
	MaxBackoff time.Duration
}

// DefaultRetry applies to steps without their own policy.
var DefaultRetry = RetryPolicy{Attempts: 5, Backoff: time.Second, MaxBackoff: time.Minute}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = DefaultRetry.Attempts
	}
	if p.Backoff <= 0 {
		p.Backoff = DefaultRetry.Backoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = DefaultRetry.MaxBackoff
	}
	return p
}

// Delay is the backoff after the given failed attempt (1-based).
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.Backoff
	for i := 1; i < attempt && d < p.MaxBackoff; i++ {
		if d > p.MaxBackoff/2 {
			return p.MaxBackoff
		}
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// PermanentError marks a step error that retrying cannot fix: the run goes to
// the dead letters at once instead of using up its attempts.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the step is not retried.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// validate catches request mistakes when the run parks, not days later
// when the wait expires.
func (r *ApprovalRequest) validate() error {
	switch {
	case r.Group == "":
		return errors.New("approval request without a group")
	case r.TTL < 0:
		return fmt.Errorf("approval request TTL %s is negative", r.TTL)
	case r.Reminders < 0:
		return fmt.Errorf("approval request with %d reminders", r.Reminders)
	}
	switch r.OnExpiry {
	case "", ExpireReject:
	case ExpireEscalate:
		if r.EscalateTo == "" {
			return errors.New("approval request escalates on expiry but names no EscalateTo group")
		}
	case ExpireRemind:
		if r.Reminders == 0 {
			return errors.New("approval request reminds on expiry but sets no Reminders")
		}
	default:
		return fmt.Errorf("approval request OnExpiry %q: use reject, escalate or remind", r.OnExpiry)
	}
	return nil
}
