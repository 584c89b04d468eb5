package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// Key is the idempotency key of a tool call: "<run>:step<n>", named for the
// run and the step, never the attempt. A retry presents the same key, so a
// backend that honours keys performs the call once.
type Key string

// Tool is a tool the model may call. Build one with NewTool.
type Tool struct {
	def model.ToolDef
	run func(ctx context.Context, key Key, args json.RawMessage) (Output, error)
	// approval, when set, gates calls.
	approval *Approval
	effect   bool
}

// Output is what a tool call produced.
type Output struct {
	// Content is what the model reads: text or JSON.
	Content string
	// Replayed: the backend answered that it had seen the key already (an
	// earlier attempt performed the call).
	Replayed bool
}

// Replayer is implemented by tool results that know whether the backend
// replayed the call (an Idempotent-Replayed answer).
type Replayer = steps.Replayer

// NewTool makes a tool of a typed function. args are decoded from the
// model's JSON (arguments that don't decode are reported to the model as a
// failed call, not retried); the result is encoded as JSON for the model,
// or passed as is when R is a string. The function must use key for its
// side effect: it is the same on every attempt of the step.
//
// What fn returns decides what happens: a result is recorded and the model
// reads it; an error wrapped with Refuse is recorded and the model reads it
// as a failed call; steps.Permanent dead-letters the run; any other error
// retries the step by its policy (nothing recorded; the next attempt calls
// fn again with the same key).
func NewTool[A, R any](name, description, schema string, fn func(ctx context.Context, key Key, args A) (R, error)) *Tool {
	t := &Tool{def: model.ToolDef{Name: name, Description: description}}
	if schema != "" {
		t.def.Schema = json.RawMessage(schema)
	}
	t.run = func(ctx context.Context, key Key, raw json.RawMessage) (Output, error) {
		var args A
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &args); err != nil {
				return Output{}, Refuse(fmt.Errorf("arguments of %s: %v", name, err))
			}
		}
		r, err := fn(ctx, key, args)
		if err != nil {
			return Output{}, err
		}
		var out Output
		if rp, ok := any(r).(Replayer); ok {
			out.Replayed = rp.ProviderReplayed()
		}
		if s, ok := any(r).(string); ok {
			out.Content = s
			return out, nil
		}
		b, err := json.Marshal(r)
		if err != nil {
			return Output{}, steps.Permanent(fmt.Errorf("encode the result of %s: %w", name, err))
		}
		out.Content = string(b)
		return out, nil
	}
	return t
}

// Name is the tool's name as the model sees it.
func (t *Tool) Name() string { return t.def.Name }

// Def is the definition the model is given.
func (t *Tool) Def() model.ToolDef { return t.def }

// Effect marks the tool as having a side effect (it pays, sends, writes):
// its calls are listed as effects of the run with their keys, replayed or
// not. Returns t.
func (t *Tool) Effect() *Tool {
	t.effect = true
	return t
}

// Approval gates a tool's calls on a person's (or a system's) decision.
type Approval struct {
	// Group may decide. Required.
	Group string
	// When says whether this call needs approval (a refund over a
	// threshold); nil means every call does. An error dead-letters the run.
	When func(args json.RawMessage) (bool, error)
	// TTL, OnExpiry, EscalateTo and Reminders as in steps.ApprovalRequest.
	TTL        time.Duration
	OnExpiry   string
	EscalateTo string
	Reminders  int
}

// NeedsApproval gates the tool's calls: the loop parks with the exact call
// as the payload and runs it only once the decision on that payload is
// "approved". A rejection is told to the model as a failed call, with the
// decider and the reason. Returns t.
func (t *Tool) NeedsApproval(a Approval) *Tool {
	t.approval = &a
	return t
}

// RefusedError is a tool failure the model should hear about (a refund
// over the order's amount, an unknown order): recorded, and given to the
// model as a failed call. Make one with Refuse.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Refuse marks err as an answer for the model rather than a failure to
// retry.
func Refuse(err error) error {
	if err == nil {
		return nil
	}
	return &RefusedError{Err: err}
}

// CheckThenAct makes a side effect safe on a backend that cannot honour
// idempotency keys, as long as it stores the key with what it does (a
// reference field, metadata, a note) and can find it by the key. lookup
// asks the backend for what was done under key; only when nothing was does
// act run. A retry after act succeeded, even one whose result was lost in
// a crash, finds the effect and returns it.
//
// The check and the act are two calls, so two attempts running at once
// could both find nothing. The worker prevents that in normal operation
// (one delivery in flight per step; a delivery that outlives its ack wait
// is fenced at commit, not before the body), so pair the wrapper with a
// Reconciler, which finds what slipped through.
func CheckThenAct[A, R any](lookup func(ctx context.Context, key Key) (R, bool, error), act func(ctx context.Context, key Key, args A) (R, error)) func(ctx context.Context, key Key, args A) (R, error) {
	return func(ctx context.Context, key Key, args A) (R, error) {
		r, found, err := lookup(ctx, key)
		if err != nil {
			var zero R
			return zero, fmt.Errorf("look up %s before acting: %w", key, err)
		}
		if found {
			return r, nil
		}
		return act(ctx, key, args)
	}
}

// errNoSuchTool is told to the model when it calls a tool it was not given.
var errNoSuchTool = errors.New("no such tool")
