package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// How a worker takes messages from a workflow's consumer.
//
// A message handed to a worker starts its ack timer on the server, so a
// worker must not hold messages it cannot start soon: with slow steps (a
// model call of a minute) a prefetched message would wait for a free slot
// past its ack wait, be redelivered to another worker and run twice. With
// fast steps, asking the server for exactly the free slots costs a pull
// request, an inbox subscription and a goroutine per one or two messages,
// which dominated the step's CPU cost.
//
// So the puller measures how long its steps take and prefetches only what
// its slots will start within prefetchHorizon: n = concurrency × horizon /
// mean step time, at most the concurrency. With n of at least streamMin it
// keeps one pull subscription open that holds up to n messages ahead of the
// free slots (jetstream's Messages). Below that (steps of seconds or more)
// it fetches exactly the free slots, and no message ever waits in this
// worker for a slot.
const (
	prefetchHorizon = time.Second
	// streamMin and streamMax bound the prefetch at which the puller keeps
	// a subscription open; between them it keeps the mode it is in.
	streamMin = 4
	streamMax = 8
	// fetchWait bounds one fetch of free slots when the consumer is idle.
	fetchWait = time.Second
	// streamExpiry is how long each pull of an open subscription waits;
	// the server sends heartbeats at half of it.
	streamExpiry = 10 * time.Second
)

// job is one delivery handed to a step goroutine, with the clock of the
// workflow it belongs to.
type job struct {
	msg   jetstream.Msg
	clock *stepClock
}

// stepClock is a moving average of how long a workflow's steps take from
// delivery to ack. Zero means no step has finished yet.
type stepClock struct{ mean atomic.Int64 }

func (c *stepClock) observe(d time.Duration) {
	for {
		old := c.mean.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/16
		}
		if c.mean.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

// prefetch is how many messages the slots start within the horizon, at
// most limit; 0 while no step has finished.
func (c *stepClock) prefetch(slots, limit int) int {
	mean := c.mean.Load()
	if mean <= 0 {
		return 0
	}
	n := int64(slots) * int64(prefetchHorizon) / mean
	return int(min(n, int64(limit)))
}

// puller takes one workflow's messages and hands them to the step
// goroutines, one slot (w.sem) per message.
type puller struct {
	w        *Worker
	workflow string
	c        jetstream.Consumer
	maxBatch int
	jobs     chan<- job
	clock    *stepClock
	backoff  time.Duration
	// gone: the consumer was seen deleted and is not created again yet.
	// Later errors of the old subscription need not say so again (a pull
	// on a deleted consumer times out), so every failure retries the
	// creation until it succeeds.
	gone bool
}

func (p *puller) run(ctx context.Context) {
	p.backoff = 100 * time.Millisecond
	streaming := false
	for ctx.Err() == nil {
		n := p.clock.prefetch(p.w.cfg.Concurrency, p.maxBatch)
		switch {
		case n >= streamMax:
			streaming = true
		case n < streamMin:
			streaming = false
		}
		var err error
		if streaming {
			err = p.stream(ctx, max(n, streamMin))
		} else {
			err = p.fetch(ctx)
		}
		if err != nil && ctx.Err() == nil {
			p.failed(ctx, err)
			continue
		}
		p.backoff = 100 * time.Millisecond
	}
}

// failed handles a pull error: a consumer that is gone is created again,
// anything else is retried after a backoff.
func (p *puller) failed(ctx context.Context, err error) {
	if p.recreate(ctx, err) {
		return
	}
	p.w.log.Warn().Err(err).Str("workflow", p.workflow).Dur("retry_in", p.backoff).Msg("pulling steps failed")
	select {
	case <-time.After(p.backoff):
	case <-ctx.Done():
	}
	p.backoff = min(p.backoff*2, 5*time.Second)
}

// recreate creates the consumer again when err says it is gone, or when it
// was seen gone before and is not back yet; true once it is.
//
// A consumer deleted while no pull request of ours was waiting on it says
// nothing: the next pull finds no one to answer it (no responders), and a
// stream of pulls just stops getting heartbeats. Those errors are also
// what a server restart or a leader election looks like, so the server is
// asked whether the consumer still exists before it is created again.
func (p *puller) recreate(ctx context.Context, err error) bool {
	p.gone = p.gone || consumerGone(err) || p.missing(ctx, err)
	if !p.gone {
		return false
	}
	nc := p.w.recreateConsumer(ctx, p.workflow)
	if nc == nil {
		return false
	}
	p.c, p.gone = nc, false
	return true
}

// missing reports whether err may come from a deleted consumer and the
// server says the consumer, or its stream, does not exist (a stream
// deleted, or lost with a server restarted without its store).
func (p *puller) missing(ctx context.Context, err error) bool {
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrNoHeartbeat) {
		return false
	}
	_, ierr := p.c.Info(ctx)
	return consumerGone(ierr)
}

// acquire blocks for a free slot; false once ctx ended.
func (p *puller) acquire(ctx context.Context) bool {
	select {
	case p.w.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	if ctx.Err() != nil {
		// select picks at random when both are ready.
		p.w.release(1)
		return false
	}
	return true
}

// dispatch hands msg, which holds a slot, to a step goroutine; once
// shutting down it hands the message back to the server at once rather
// than let its ack wait run out.
func (p *puller) dispatch(ctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		_ = msg.Nak()
		p.w.release(1)
		return
	}
	p.jobs <- job{msg: msg, clock: p.clock}
}

// fetch asks the server for as many messages as there are free slots, at
// least one, and dispatches them as they arrive.
//
// Only a request that answers at once (no wait) holds more than one slot:
// waiting for messages holds exactly one. A fetch that waited with every
// free slot held them for up to fetchWait on an empty consumer, and in a
// worker with several workflows the idle ones took turns holding nearly
// all the slots while the busy one's steps waited for a slot (a worker of
// 64 slots kept about 7 steps in flight).
func (p *puller) fetch(ctx context.Context) error {
	if !p.acquire(ctx) {
		return nil
	}
	n := 1
more:
	for n < p.maxBatch {
		select {
		case p.w.sem <- struct{}{}:
			n++
		default:
			break more
		}
	}
	if n > 1 {
		got, err := p.fetchBatch(ctx, n, p.c.FetchNoWait)
		if err != nil || got > 0 {
			return err
		}
		// Nothing waiting (fetchBatch released the slots): wait for a
		// message with one slot.
		if !p.acquire(ctx) {
			return nil
		}
	}
	// The wait ends with ctx too, so that a stopping worker does not sit
	// out the fetch on an idle consumer. The server keeps the pull request
	// until its expiry: a message it delivers after that goes nowhere and
	// is redelivered after the ack wait, as it would be had the worker
	// stopped a moment earlier.
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	defer cancel()
	_, err := p.fetchBatch(ctx, 1, func(n int) (jetstream.MessageBatch, error) {
		return p.c.Fetch(n, jetstream.FetchContext(fctx))
	})
	if fctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Stopping, or the wait ran out before the server's expiry
		// answer (FetchContext asks for 90% of it): nothing came.
		return nil
	}
	return err
}

// fetchBatch fetches up to n messages for the n slots held, dispatches
// what arrives, releases the slots left over and returns how many came.
func (p *puller) fetchBatch(ctx context.Context, n int, fetch func(int) (jetstream.MessageBatch, error)) (int, error) {
	batch, err := fetch(n)
	if err != nil {
		p.w.release(n)
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		p.dispatch(ctx, msg)
	}
	p.w.release(n - got)
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		// The caller creates the consumer again if it is gone, or
		// waits before the next pull: a pull that fails at once (no
		// responders) must not be repeated in a tight loop.
		return got, err
	}
	return got, nil
}

// stream keeps one pull subscription holding up to size messages ahead of
// the free slots, until the prefetch the step times call for leaves
// [size/2, size*2) or ctx ends. It then drains the subscription: the
// messages already delivered to it are dispatched (or, when shutting
// down, handed back) before it returns.
func (p *puller) stream(ctx context.Context, size int) error {
	// Missing heartbeats end the subscription with an error rather than
	// be retried inside it: a consumer deleted while none of its pulls
	// was waiting is only seen that way (see recreate). The expiry sets
	// the heartbeat to half of it, so that is seen within 10 s.
	it, err := p.c.Messages(jetstream.PullMaxMessages(size), jetstream.PullExpiry(streamExpiry), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		return err
	}
	defer it.Stop()
	stopOnCancel := context.AfterFunc(ctx, it.Drain)
	defer stopOnCancel()
	draining := false
	for {
		if !draining {
			if n := p.clock.prefetch(p.w.cfg.Concurrency, p.maxBatch); n < size/2 || n >= size*2 && size < p.maxBatch {
				it.Drain()
				draining = true
			}
		}
		held := p.acquire(ctx)
		msg, err := it.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			if held {
				p.w.release(1)
			}
			if draining || ctx.Err() != nil {
				return nil
			}
			return err
		case err != nil:
			if held {
				p.w.release(1)
			}
			return err
		case !held:
			_ = msg.Nak() // shutting down
			continue
		}
		p.dispatch(ctx, msg)
	}
}
