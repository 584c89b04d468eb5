package steps

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// CallOption is a setting of one journaled call: Call, CallNoted, Effect
// and model.Call take them.
type CallOption func(*callSettings)

type callSettings struct {
	resource string
}

func settingsOf(opts []CallOption) callSettings {
	var cs callSettings
	for _, o := range opts {
		if o != nil {
			o(&cs)
		}
	}
	return cs
}

// Resource names the shared resource a call uses, a model provider or an
// API ("anthropic", "payments-api"). Before the call is made, the step
// takes a token of the resource's fleet-wide rate limit (set by an
// operator: `durable limit set anthropic --rate 600/m`); when the call
// answers that it was rate limited (an error implementing
// flow.RateLimited, such as a model.Error for HTTP 429), the resource
// slows down for the whole fleet for as long as the provider asked. A
// call answered from the journal takes no token. A resource with no
// limit set costs nothing, and without RateLimits in the step's context
// (a worker with no flow store, a test) Resource changes nothing.
func Resource(name string) CallOption {
	return func(cs *callSettings) { cs.resource = name }
}

// RateLimits takes the tokens of the resources calls use (Resource). The
// worker fills ContextConfig.RateLimits when it has a flow store
// (worker.Config.Flow); a test of a workflow's steps may give its own.
type RateLimits interface {
	// Take takes a token of resource for a call about to be made. It
	// may wait in place, a short while (returning ctx's error if ctx
	// ends meanwhile). It returns 0 when a token was taken; otherwise
	// how long until one may be, and the call is not made: the step is
	// handed back to the queue for that long (ThrottledError).
	Take(ctx context.Context, resource string) (wait time.Duration, err error)
	// SlowDownOn is told what a call of resource returned. When err is
	// a rate-limit answer (flow.RetryAfter), it slows resource down
	// fleet-wide and returns for how long; for any other err (or nil)
	// it returns 0 and changes nothing.
	SlowDownOn(ctx context.Context, resource string, err error) time.Duration
}

// ErrThrottled is what a ThrottledError is (errors.Is).
var ErrThrottled = errors.New("call throttled by its resource's rate limit")

// ThrottledError: a call of a rate-limited resource (Resource) was not
// made because no token comes soon, or was made and answered that it was
// rate limited. The worker hands the step back to the queue for Wait and
// runs it again then; this is not a failure of the step and uses none of
// its attempts. A step should return it (wrapped or not) rather than
// handle it.
type ThrottledError struct {
	Call, Resource string
	// Wait is how long until the resource may have a token.
	Wait time.Duration
	// Err is the call's rate-limit answer when the provider refused the
	// call; nil when no token was taken and the call was not made.
	Err error
}

func (e *ThrottledError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("call %s: %s rate limited the call, slowed down for %s: %v", e.Call, e.Resource, e.Wait, e.Err)
	}
	return fmt.Sprintf("call %s: no token of %s for %s", e.Call, e.Resource, e.Wait)
}

// Is makes a ThrottledError ErrThrottled.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// Unwrap is the provider's rate-limit answer, if any.
func (e *ThrottledError) Unwrap() error { return e.Err }

// resourceKey is the context key of CallResource.
type resourceKey struct{}

// CallResource is the resource whose fleet-wide rate limit the call made
// with ctx took its token of (Resource), when the step's context has
// RateLimits; "" otherwise. A client that retries on its own (an SDK, a
// model adapter: model.Retry does this) should not retry a rate-limit
// answer when it is not "": the step hands the answer to the fleet's
// limit, which slows every worker down, instead of each retrying alone.
func CallResource(ctx context.Context) string {
	r, _ := ctx.Value(resourceKey{}).(string)
	return r
}

// takeToken takes a token of the call's resource, when it names one and
// the context has RateLimits: nil when the call may go ahead.
func (s *Context) takeToken(ctx context.Context, name string, cs callSettings) error {
	if cs.resource == "" || s.cfg.RateLimits == nil {
		return nil
	}
	wait, err := s.cfg.RateLimits.Take(ctx, cs.resource)
	if err != nil {
		return fmt.Errorf("call %s: take a token of %s: %w", name, cs.resource, err)
	}
	if wait > 0 {
		return &ThrottledError{Call: name, Resource: cs.resource, Wait: wait}
	}
	return nil
}

// limited marks ctx for a call that took a token of its resource
// (CallResource).
func (s *Context) limited(ctx context.Context, cs callSettings) context.Context {
	if cs.resource == "" || s.cfg.RateLimits == nil {
		return ctx
	}
	return context.WithValue(ctx, resourceKey{}, cs.resource)
}

// callFailed is the error of a call that returned err: a ThrottledError
// when err is a rate-limit answer of the call's resource (which is then
// slowed down fleet-wide), err otherwise.
func (s *Context) callFailed(ctx context.Context, name string, cs callSettings, err error) error {
	if cs.resource == "" || s.cfg.RateLimits == nil {
		return err
	}
	if wait := s.cfg.RateLimits.SlowDownOn(ctx, cs.resource, err); wait > 0 {
		return &ThrottledError{Call: name, Resource: cs.resource, Wait: wait, Err: err}
	}
	return err
}
