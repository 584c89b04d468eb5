package flow

import (
	"errors"
	"time"
)

// RateLimited is implemented by errors that can be a rate-limit answer
// (HTTP 429 and the like): a model adapter's error, a tool's. ok says
// whether this one is; retryAfter is what the provider asked to wait, 0
// if it did not say.
//
// An interface rather than a model's error type: pkg/flow then depends on
// no model, SDK or step package, and any tool's error can say it.
type RateLimited interface {
	RateLimited() (retryAfter time.Duration, ok bool)
}

// Bounds of the wait RetryAfter reads.
const (
	defaultRetryAfter = time.Second
	maxRetryAfter     = 5 * time.Minute
)

// RetryAfter reports whether err (or an error it wraps) is a rate-limit
// answer, and how long to slow down for: the wait the provider asked for;
// 1s if it named none; at most 5 minutes, so that a bad header or a daily
// quota blocks the fleet for 5 minutes, after which a call finds out
// again.
func RetryAfter(err error) (time.Duration, bool) {
	var rl RateLimited
	if !errors.As(err, &rl) {
		return 0, false
	}
	d, ok := rl.RateLimited()
	if !ok {
		return 0, false
	}
	if d <= 0 {
		d = defaultRetryAfter
	}
	return min(d, maxRetryAfter), true
}
