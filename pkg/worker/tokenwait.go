package worker

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// How long a step waited for rate-limit tokens, for its checkpoint
// (Checkpoint.TokenResource and TokenWaitMS): the sleeps of the
// committing delivery's calls, which it times, and the time its step was
// handed back to the queue before it (throttled: NakWithDelay, or a
// renewal), which it infers. JetStream keeps no trace of a hand-back
// that a later delivery could read: a Nak carries no header, and a
// redelivery's metadata has its delivery count and its message's store
// time, not the delays asked for. Writing each hand-back down is what
// the renewals were chosen to avoid (a write per hand-back). So when its
// step was handed back for tokens meanwhile, the committing delivery
// counts from when the step's message was first stored (since: a renewed
// copy carries the original's time in sinceHeader) to when its first
// call that takes a token got it, less its own wait for a slot. It
// takes the step for handed back when the delivery is not its message's
// first (or is a renewed copy), that call's resource has a limit, and no
// failure was recorded since (a retry's backoff is not a wait for
// tokens). The time is a bound from above: it also holds the message's
// wait for its first delivery (short unless the consumer's MaxAckPending
// is full), earlier deliveries' slot waits, and any redelivery after a
// crash among the hand-backs; and a step whose call's resource has a
// limit, redelivered after a crash with no hand-back at all, counts the
// redelivery as a wait for tokens too.

// sinceHeader, on a renewed copy of a step message (renew), is when the
// original message was stored, in Unix milliseconds; a copy's copy keeps
// it. Workers that do not know it copy it with the other headers.
const sinceHeader = "Durable-Since"

// firstStored is when the step message msg, stored at stored, was first
// stored: stored, or the original's time a renewed copy carries; and
// whether msg is such a copy.
func firstStored(msg jetstream.Msg, stored time.Time) (time.Time, bool) {
	v := msg.Headers().Get(sinceHeader)
	if v == "" {
		return stored, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return stored, false
	}
	return time.UnixMilli(ms), true
}

// tokenWaits is what one delivery's calls met at their rate limits
// (rateLimits.Take); a step's calls may take tokens from several
// goroutines.
type tokenWaits struct {
	mu sync.Mutex
	t  tokenTally
}

type tokenTally struct {
	// asked is the resource of the delivery's first call that took a
	// token; limited: it answered a wait in this delivery; granted: when
	// that call got its token, after sleeping grantSlept for it.
	asked      string
	limited    bool
	granted    time.Time
	grantSlept time.Duration
	// sleptOn is the first resource a call slept for; slept the sleeps
	// of the calls that then got their token, in all.
	sleptOn string
	slept   time.Duration
}

// saw records that a call asking for a token of resource was answered
// wait.
func (w *tokenWaits) saw(resource string, wait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t.asked == "" {
		w.t.asked = resource
	}
	if wait > 0 && resource == w.t.asked {
		w.t.limited = true
	}
}

// got records that a call got its token of resource at at, after
// sleeping slept for it in its step.
func (w *tokenWaits) got(resource string, slept time.Duration, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if resource == w.t.asked && w.t.granted.IsZero() {
		w.t.granted, w.t.grantSlept = at, slept
	}
	if slept == 0 {
		return
	}
	if w.t.sleptOn == "" {
		w.t.sleptOn = resource
	}
	w.t.slept += slept
}

func (w *tokenWaits) tally() tokenTally {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.t
}

// tokenWait is what a step waited for tokens: the resource of its first
// wait, and all its waits.
type tokenWait struct {
	resource string
	d        time.Duration
}

// tokenWait is what the delivery's step waited for tokens, failures the
// step's recorded failures: its calls' sleeps, or, when it was handed
// back, the time from its message's first store to its first call's
// token (which holds that call's sleep) and the other calls' sleeps.
func (w *Worker) tokenWait(ctx context.Context, d *delivery, failures []checkpoint.Failure) tokenWait {
	t := d.tokens.tally()
	if w.handedBack(ctx, d, t, failures) {
		back := max(t.granted.Sub(d.since)-d.waited, t.grantSlept)
		return tokenWait{resource: t.asked, d: back + t.slept - t.grantSlept}
	}
	return tokenWait{resource: t.sleptOn, d: t.slept}
}

// handedBack says whether the delivery's step was handed back for tokens
// before it, as inferred (see above).
func (w *Worker) handedBack(ctx context.Context, d *delivery, t tokenTally, failures []checkpoint.Failure) bool {
	if t.granted.IsZero() || d.since.IsZero() || d.attempt <= 1 && !d.renewed {
		return false
	}
	for _, f := range failures {
		if !f.At.Before(d.since) {
			return false
		}
	}
	// Redelivered after a crash or a store error, a step whose call has
	// no limit was not handed back for it.
	return d.renewed || t.limited || w.hasLimit(ctx, t.asked)
}

// hasLimit says whether the flow store holds a limit of resource (or a
// slow-down of it), or a rate per key: a read or two, by a redelivered
// step about to commit.
func (w *Worker) hasLimit(ctx context.Context, resource string) bool {
	if w.cfg.Flow == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := w.cfg.Flow.Get(ctx, resource); err == nil {
		return true
	}
	_, err := w.cfg.Flow.RatePerKey(ctx, resource)
	return err == nil
}

// millis is d in a checkpoint's milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
