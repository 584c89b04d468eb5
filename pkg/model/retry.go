package model

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// Error is a failed model call, classified for whoever decides what next.
type Error struct {
	Provider string // "anthropic", "openai"
	// StatusCode is the HTTP status; 0 when no response came (connection
	// error, timeout).
	StatusCode int
	// Retryable is true for 408, 409, 429, 5xx and connection errors: a later
	// attempt may succeed. Anything else (400, 401, 403, 404, 422...) will fail
	// the same way again.
	Retryable bool
	// RetryAfter is what the provider asked us to wait (Retry-After,
	// retry-after-ms), 0 if it did not say.
	RetryAfter time.Duration
	// Attempts is how many requests were made before giving up.
	Attempts int
	Err      error
}

func (e *Error) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	status := "no response"
	if e.StatusCode != 0 {
		status = "HTTP " + strconv.Itoa(e.StatusCode)
	}
	return fmt.Sprintf("%s: %s (%s, %d attempts): %v", e.Provider, status, kind, e.Attempts, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// RateLimited reports whether the provider answered that it is rate
// limited (HTTP 429), and how long it asked to wait (0 if it did not
// say): a fleet-wide limit slows down for that long (flow.RateLimited).
func (e *Error) RateLimited() (retryAfter time.Duration, ok bool) {
	return e.RetryAfter, e.StatusCode == http.StatusTooManyRequests
}

// Classify builds the *Error for a provider failure. status is 0 when no
// response came; header is the response's, or nil.
func Classify(provider string, status int, header http.Header, err error) *Error {
	return &Error{
		Provider:   provider,
		StatusCode: status,
		Retryable:  status == 0 || status == http.StatusRequestTimeout || status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500,
		RetryAfter: retryAfter(header),
		Err:        err,
	}
}

// retryAfter reads retry-after-ms (Anthropic and OpenAI send it) or
// Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t))
	}
	return 0
}

// Retry is how an adapter retries a call that failed with a retryable
// [*Error]. The SDKs' own retries are switched off: their backoff is fixed,
// and this one is configurable and observable.
type Retry struct {
	// MaxAttempts is the number of requests, first one included. Default 4;
	// 1 disables retries.
	MaxAttempts int
	// BaseDelay is the wait before the first retry; it doubles each retry.
	// Default 500ms.
	BaseDelay time.Duration
	// MaxDelay caps one wait, a provider's Retry-After included. Default 30s.
	MaxDelay time.Duration
	// OnRetry, if set, is called before each wait (for logs, metrics, tests)
	// with the attempt that failed (1-based), its error and the wait.
	OnRetry func(attempt int, err *Error, wait time.Duration)
}

func (r Retry) withDefaults() Retry {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = 4
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = 500 * time.Millisecond
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = 30 * time.Second
	}
	return r
}

// Backoff is the wait after the given failed attempt (1-based): BaseDelay
// doubled per attempt, capped at MaxDelay, minus up to a quarter of jitter
// so a fleet that failed together does not retry together.
func (r Retry) Backoff(attempt int) time.Duration {
	r = r.withDefaults()
	d := r.MaxDelay
	if shift := attempt - 1; shift < 30 {
		d = min(r.BaseDelay<<shift, r.MaxDelay)
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// Do calls fn until it succeeds, fails with an error that is not a retryable
// *Error, runs out of attempts, or ctx ends. The *Error it returns carries
// the attempt count; a permanent one is wrapped with steps.Permanent. A
// rate-limit answer (429) of a call that takes tokens of a fleet-wide
// limit (steps.CallResource) is returned at once, not retried: the limit
// slows the whole fleet down for the provider's Retry-After.
func (r Retry) Do(ctx context.Context, fn func(context.Context) error) error {
	r = r.withDefaults()
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		var me *Error
		if !errors.As(err, &me) {
			return err
		}
		me.Attempts = attempt
		if !me.Retryable {
			return steps.Permanent(me)
		}
		if _, limited := me.RateLimited(); attempt >= r.MaxAttempts || limited && steps.CallResource(ctx) != "" {
			return me
		}
		wait := min(max(r.Backoff(attempt), me.RetryAfter), r.MaxDelay)
		if r.OnRetry != nil {
			r.OnRetry(attempt, me, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (waiting to retry: %w)", ctx.Err(), me)
		case <-t.C:
		}
	}
}
