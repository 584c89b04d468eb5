package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/flow"
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
// it fetches the free slots.
//
// Waiting for messages holds no slot. A worker runs all its workflows on
// one set of slots, and a puller that waited on an idle consumer holding
// one (a second per fetch, or as long as an open subscription stayed
// idle) took it from the busy workflows: with 4 slots and 6 idle
// workflows the busy one ran one step at a time. So a fetch looks for
// messages with a free slot in hand, blocking until one frees, and takes
// at once what the consumer has for it and the other free slots: in fetch
// mode a backlog is only taken with the slots to start it. Only when the
// consumer is empty does the puller give the slots back and wait for a
// message holding none; an open subscription likewise hands over its next
// message before it takes a slot. A message that then finds every slot
// busy waits for one here, with InProgress heartbeats so that its ack
// wait does not run out. There is at most one such message per workflow
// (a waiting fetch asks for one), and it waits its turn with the other
// pullers, each waiting for one slot at a time: with no more workflows
// than slots it starts within about a step. In fetch mode that is rare:
// the consumer was empty and a slot free when the wait began.
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
	// slot: a concurrency slot granted to the message while it was
	// queued (flowslots.go).
	slot *flow.Slot
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
	// idle: the last fetch waited for a message and none came.
	idle bool
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

// acquireFree takes up to n slots that are free now and returns how many.
func (p *puller) acquireFree(n int) int {
	for i := range n {
		select {
		case p.w.sem <- struct{}{}:
		default:
			return i
		}
	}
	return n
}

// hold waits for a slot for msg, which was delivered to this worker
// without one, telling the server meanwhile that it is in progress; false
// once ctx ended (msg is then not the caller's to start).
func (p *puller) hold(ctx context.Context, msg jetstream.Msg) bool {
	if p.acquireFree(1) == 1 {
		return true
	}
	// The step's own heartbeats begin when it starts, a heartbeat
	// interval after: the gap between two stays under the ack wait.
	hb := startHeartbeat(msg, p.w.heartbeat, nil)
	defer hb.stop()
	return p.acquire(ctx)
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

// fetch looks for messages with the free slots (see look) and, when the
// consumer has none, waits for one holding no slot.
//
// After a wait that found nothing, a slot free now means nothing was
// missed in between (a message that came would answer the next wait at
// once, and find the slot): the puller waits again without looking first,
// one pull a second on an idle consumer.
func (p *puller) fetch(ctx context.Context) error {
	if !p.idle || len(p.w.sem) == cap(p.w.sem) {
		got, err := p.look(ctx)
		if err != nil || got > 0 || ctx.Err() != nil {
			return err
		}
	}
	// The wait ends with ctx too, so that a stopping worker does not sit
	// out the fetch on an idle consumer. The server keeps the pull request
	// until its expiry: a message it delivers after that goes nowhere and
	// is redelivered after the ack wait, as it would be had the worker
	// stopped a moment earlier.
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	defer cancel()
	got, err := p.take(ctx, 0, func() (jetstream.MessageBatch, error) {
		return p.c.Fetch(1, jetstream.FetchContext(fctx))
	})
	p.idle = got == 0
	if fctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// Stopping, or the wait ran out before the server's expiry
		// answer (FetchContext asks for 90% of it): nothing came.
		return nil
	}
	return err
}

// look takes a free slot, blocking until one frees, and any others free
// (up to maxBatch), and takes what the consumer has for them without
// waiting; it returns how many messages came.
func (p *puller) look(ctx context.Context) (int, error) {
	if !p.acquire(ctx) {
		return 0, nil
	}
	n := 1 + p.acquireFree(p.maxBatch-1)
	return p.take(ctx, n, func() (jetstream.MessageBatch, error) { return p.c.FetchNoWait(n) })
}

// take fetches with fetch for the n slots held (none for a fetch that
// waits, which asks for one message) and dispatches what arrives, a
// message beyond the slots once it holds one (see hold). It releases the
// slots left over and returns how many messages came.
func (p *puller) take(ctx context.Context, n int, fetch func() (jetstream.MessageBatch, error)) (int, error) {
	batch, err := fetch()
	if err != nil {
		p.w.release(n)
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		if got > n && !p.hold(ctx, msg) {
			_ = msg.Nak() // shutting down
			continue
		}
		p.dispatch(ctx, msg)
	}
	p.w.release(max(n-got, 0))
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
		// The message first, then its slot: waiting on an idle
		// subscription holds none.
		msg, err := it.Next()
		switch {
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			if draining || ctx.Err() != nil {
				return nil
			}
			return err
		case err != nil:
			return err
		case !p.hold(ctx, msg):
			_ = msg.Nak() // shutting down
			continue
		}
		p.dispatch(ctx, msg)
	}
}
