package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
)

// FlowMetrics is a Metrics that also takes the events of the fleet-wide
// rate limits (Config.Flow); pkg/metrics implements it. A Metrics that
// does not is told nothing of them.
type FlowMetrics interface {
	// Throttled: a call of resource found no token at once; handedBack:
	// its step was handed back to the queue rather than waiting in place.
	Throttled(resource string, handedBack bool)
	// TokenWaited: a throttled call of resource waited d in its step
	// and got its token.
	TokenWaited(resource string, d time.Duration)
	// SlowedDown: a call of resource was answered with a rate-limit
	// answer, and the resource was slowed down fleet-wide for d.
	SlowedDown(resource string, d time.Duration)
}

// SlotMetrics is a Metrics that also takes the events of the fleet-wide
// concurrency limits (steps.Uses, Config.Flow); pkg/metrics implements
// it. Apart from FlowMetrics, so that an implementation of either keeps
// working as the other grows.
type SlotMetrics interface {
	// SlotWaited: a step queued d for a slot of resource's concurrency
	// limit and got it.
	SlotWaited(resource string, d time.Duration)
	// Slots: this worker's steps hold inUse slots of resource's
	// concurrency limit and waiting are queued for one; sampled every
	// second while the worker runs.
	Slots(resource string, inUse, waiting int)
}

// Waits for a token inside the step: a call sleeps in place for a wait
// of up to inPlaceWait, and for at most inPlaceTotal in all; a longer
// wait hands the step back to the queue (NakWithDelay), holding nothing
// meanwhile. A token of a limit at 1/s or faster is usually that close.
const (
	inPlaceWait  = time.Second
	inPlaceTotal = 3 * time.Second
	// storeRetry is the hand-back of a call whose limit could not be read.
	storeRetry = time.Second
	// renewAt: a step handed back for its rate limit on its renewAt-th
	// delivery or later is published afresh (and the delivery acked)
	// instead of handed back, so that its deliveries start again from 1:
	// the delivery fuse (admit) counts deliveries that never finish, and
	// a hand-back is not one. Well below minDeliveryFuse, so that the
	// fuse still sees a step that crashes its worker between hand-backs
	// within renewAt deliveries.
	renewAt = minDeliveryFuse / 2
)

// rateLimits is the steps.RateLimits of one delivery: the worker's
// Limiter, waits in place, metrics. key is the run's fairness key, for
// the resources with a rate per key (worked out once, when one needs it).
type rateLimits struct {
	w     *Worker
	d     *delivery
	def   steps.Definition
	input json.RawMessage
}

// rateLimitsFor is what steps.ContextConfig.RateLimits gets for the
// delivery d of a step of def in run: nil when the worker has no flow
// store.
func (w *Worker) rateLimitsFor(d *delivery, def steps.Definition, run checkpoint.Run) steps.RateLimits {
	if w.limiter == nil {
		return nil
	}
	return rateLimits{w: w, d: d, def: def, input: run.Input}
}

// key is the run's fairness key, worked out once per delivery (a step's
// calls may take tokens from several goroutines).
func (r rateLimits) key() string {
	r.d.keyOnce.Do(func() {
		if lim, ok := r.def.(steps.Limited); ok {
			r.d.key = lim.FairnessKeyOf(r.input)
		}
	})
	return r.d.key
}

// take takes a token of resource, and of the run's key's rate when
// resource has a rate per key (flow.Store.SetRatePerKey; the key is
// Workflow.FairnessKey's).
func (r rateLimits) take(ctx context.Context, resource string, now time.Time) (time.Duration, error) {
	perKey, err := r.w.limiter.HasRatePerKey(ctx, resource)
	switch {
	case err != nil:
		return 0, err
	case perKey:
		return r.w.limiter.TakeKey(ctx, resource, r.key(), now)
	}
	return r.w.limiter.Take(ctx, resource, now)
}

// Take implements steps.RateLimits.
func (r rateLimits) Take(ctx context.Context, resource string) (time.Duration, error) {
	// slept is what the waits asked for, which the budget counts;
	// refused when the first ask that was answered a wait began, from
	// which the step's wait is timed.
	var slept time.Duration
	var refused time.Time
	for {
		asked := time.Now()
		wait, err := r.take(ctx, resource, asked)
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			if errors.Is(err, flow.ErrBadLimit) { // the workflow's bug: no wait mends it
				return 0, steps.Permanent(err)
			}
			r.d.log.Warn().Err(err).Str("resource", resource).Msg("rate limit not read; handing the step back")
			return storeRetry, nil
		}
		r.d.tokens.saw(resource, wait)
		if wait == 0 {
			now, waited := time.Now(), time.Duration(0)
			if !refused.IsZero() {
				waited = now.Sub(refused)
				r.report(resource, waited, false)
			}
			r.d.tokens.got(resource, waited, now)
			return 0, nil
		}
		if refused.IsZero() {
			refused = asked
		}
		if wait > inPlaceWait || slept+wait > inPlaceTotal {
			r.report(resource, slept, true)
			return wait, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return 0, err
		}
		slept += wait
	}
}

// report tells FlowMetrics of a call that found no token at once: it
// waited d in its step, then got one or was handed back.
func (r rateLimits) report(resource string, d time.Duration, handedBack bool) {
	fm, ok := r.w.cfg.Metrics.(FlowMetrics)
	if !ok {
		return
	}
	fm.Throttled(resource, handedBack)
	if !handedBack {
		fm.TokenWaited(resource, d)
	}
}

// SlowDownOn implements steps.RateLimits.
func (r rateLimits) SlowDownOn(ctx context.Context, resource string, callErr error) time.Duration {
	if _, ok := flow.RetryAfter(callErr); !ok {
		return 0
	}
	// The provider said it: tell the fleet even if the step's ctx ended.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	d, err := r.w.limiter.SlowDownOn(sctx, resource, callErr, time.Now())
	if err != nil {
		// Not stored: this step still waits as the provider asked.
		d, _ = flow.RetryAfter(callErr)
		r.d.log.Warn().Err(err).Str("resource", resource).Msg("rate-limit answer not stored: the fleet does not slow down")
		return d
	}
	r.d.log.Info().Str("resource", resource).Dur("for", d).Msg("rate-limit answer: resource slowed down fleet-wide")
	if fm, ok := r.w.cfg.Metrics.(FlowMetrics); ok {
		fm.SlowedDown(resource, d)
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// throttled settles a delivery whose step returned a steps.ThrottledError:
// handed back for the wait, with no failure recorded and no attempt used.
func (w *Worker) throttled(ctx context.Context, d *delivery, run checkpoint.Run, err error) {
	var te *steps.ThrottledError
	errors.As(err, &te)
	wait := max(te.Wait, 10*time.Millisecond)
	d.log.Debug().Str("resource", te.Resource).Dur("wait", wait).Msg("call throttled by its rate limit; step handed back")
	w.markWaiting(d)
	renewed := false
	if d.attempt >= renewAt {
		rerr := w.renew(ctx, d)
		if renewed = rerr == nil; !renewed {
			d.log.Warn().Err(rerr).Msg("throttled step not published afresh; handed back")
		}
	}
	if renewed {
		w.ack(d)
	} else {
		_ = d.msg.NakWithDelay(wait)
	}
	w.done(run.Workflow, d.name, "throttled", d)
}

// markWaiting leaves a liveness mark for a step handed back for its rate
// limit whose message waits longer than a heartbeat interval: the
// schedulers' stuck-run repair counts it as progress (a backlog may wait
// for tokens longer than --stuck-after), as it counts a long step's
// heartbeats.
func (w *Worker) markWaiting(d *delivery) {
	md, err := d.msg.Metadata()
	if err != nil || time.Since(md.Timestamp) < w.heartbeat {
		return
	}
	if mark := w.markAlive(d.m.RunID, time.Now()); mark != nil {
		mark()
	}
}

// renew publishes a copy of the delivery's message under a new id
// (queue.RenewMsgID), to be acked in its place, saying when the original
// was stored (sinceHeader). Running the step from either is harmless
// (the step protocol), so a crash between the publish and the ack costs
// a duplicate delivery at most.
func (w *Worker) renew(ctx context.Context, d *delivery) error {
	md, err := d.msg.Metadata()
	if err != nil {
		return err
	}
	h := nats.Header{}
	for k, v := range d.msg.Headers() {
		h[k] = append([]string(nil), v...)
	}
	h[jetstream.MsgIDHeader] = []string{queue.RenewMsgID(h.Get(jetstream.MsgIDHeader), md.Sequence.Stream)}
	// The copy says since when its step has been handed back (tokenwait.go).
	h[sinceHeader] = []string{strconv.FormatInt(d.since.UnixMilli(), 10)}
	pctx, cancel := context.WithTimeout(ctx, queue.PublishTimeout)
	defer cancel()
	_, err = w.cfg.JetStream.PublishMsg(pctx, &nats.Msg{Subject: d.msg.Subject(), Data: d.msg.Data(), Header: h})
	return err
}

// isThrottled: err is a steps.ThrottledError.
func isThrottled(err error) bool { return errors.As(err, new(*steps.ThrottledError)) }
