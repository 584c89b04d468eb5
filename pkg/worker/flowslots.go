package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/steps"
)

// Concurrency limits (steps.Uses, flow.Pool).
//
// A step that uses a resource with a concurrency limit takes a slot of it
// after its run is loaded and checked, and gives it back when its body
// returns. When no slot is free the delivery queues in the worker's pool:
// its step goroutine and worker slot go back to the other steps, and the
// message waits with InProgress heartbeats (a timer each, no goroutine),
// so the server neither redelivers it nor counts an attempt. When the
// pool grants it a slot the message is handled again from the start
// (the run may have moved meanwhile) with the slot in hand.
//
// A queued message is unacked: it counts against its consumer's
// MaxAckPending (1,000 by default), which bounds how many steps of one
// workflow wait in the fleet's workers. A worker that stops hands its
// queued messages back; one that is killed leaves them to be redelivered
// after the ack wait, and its slots to come back after the pool's lease.

// queued is the worker's set of deliveries waiting for a slot.
type queued struct {
	mu sync.Mutex
	ms map[*waiting]struct{}
	// redispatch: the goroutines handing granted messages to a runner.
	redispatch sync.WaitGroup
	closed     bool
}

// waiting is one message queued for a slot.
type waiting struct {
	msg    jetstream.Msg
	clock  *stepClock
	hb     *heartbeat
	ticket *flow.Ticket
}

// slot takes the slot of the resource the step at d uses, if it has a
// limit: the slot the pool granted d while it was queued, or a free one.
// With none free it queues the delivery and returns false: the delivery
// is the pool's until it grants a slot.
func (w *Worker) slot(d *delivery, def steps.Definition, run checkpoint.Run) (*flow.Slot, bool) {
	if d.slot != nil {
		s := d.slot
		d.slot = nil
		d.resource, d.waited = s.Name(), s.Waited
		d.log.Info().Str("resource", d.resource).Dur("waited", s.Waited).Msg("slot granted")
		if fm, ok := w.cfg.Metrics.(SlotMetrics); ok {
			fm.SlotWaited(d.resource, s.Waited)
		}
		return s, true
	}
	lim, ok := def.(steps.Limited)
	if w.pool == nil || !ok {
		return nil, true
	}
	resource := lim.Uses(d.name)
	if resource == "" {
		return nil, true
	}
	if s := w.pool.TryAcquire(resource); s != nil {
		return s, true
	}
	// None free, or the limit is per key: the fairness key (a decoding
	// of the input) is only needed then.
	wt := &waiting{msg: d.raw, clock: d.clock}
	w.queue.mu.Lock()
	if w.queue.closed {
		w.queue.mu.Unlock()
		_ = d.raw.Nak()
		w.done(run.Workflow, d.name, "error", d)
		return nil, false
	}
	q := flow.Queue{Key: lim.FairnessKeyOf(run.Input), Priority: lim.PriorityOf(run.Input)}
	s, ticket := w.pool.Acquire(resource, q, func(s *flow.Slot) { w.granted(wt, s) })
	if s != nil {
		w.queue.mu.Unlock()
		return s, true
	}
	// granted reads wt under w.queue.mu, held until wt is complete.
	wt.hb = startHeartbeat(d.raw, w.heartbeat, w.marker(run.ID))
	wt.ticket = ticket
	w.queue.ms[wt] = struct{}{}
	w.queue.redispatch.Add(1)
	w.queue.mu.Unlock()
	d.log.Debug().Str("resource", resource).Msg("waiting for a slot")
	w.done(run.Workflow, d.name, "queued", d)
	return nil, false
}

// granted is the pool's callback for a queued delivery: it hands the
// message and its slot to a runner once a worker slot is free, without
// blocking the pool.
func (w *Worker) granted(wt *waiting, s *flow.Slot) {
	w.queue.mu.Lock()
	delete(w.queue.ms, wt)
	w.queue.mu.Unlock()
	go func() {
		defer w.queue.redispatch.Done()
		select {
		case w.sem <- struct{}{}:
		case <-w.runCtx.Done():
			w.handBack(wt, s)
			return
		}
		if w.runCtx.Err() != nil {
			w.release(1)
			w.handBack(wt, s)
			return
		}
		wt.hb.stop()
		w.jobs <- job{msg: wt.msg, clock: wt.clock, slot: s}
	}()
}

func (w *Worker) handBack(wt *waiting, s *flow.Slot) {
	wt.hb.stop()
	s.Release()
	_ = wt.msg.Nak()
}

// closeQueue hands the queued messages back as the worker stops, and
// waits for those granted meanwhile to be handed to a runner or back.
func (w *Worker) closeQueue() {
	w.queue.mu.Lock()
	w.queue.closed = true
	all := make([]*waiting, 0, len(w.queue.ms))
	for wt := range w.queue.ms {
		all = append(all, wt)
	}
	w.queue.mu.Unlock()
	// Cancelled without w.queue.mu: a cancel gives back the key's slot
	// a delivery held while it waited for the resource's, which may
	// grant another delivery here (granted takes w.queue.mu).
	var left []*waiting
	for _, wt := range all {
		if wt.ticket.Cancel() {
			w.queue.mu.Lock()
			delete(w.queue.ms, wt)
			w.queue.mu.Unlock()
			left = append(left, wt)
		}
	}
	for _, wt := range left {
		wt.hb.stop()
		_ = wt.msg.Nak()
		w.queue.redispatch.Done()
	}
	w.queue.redispatch.Wait()
}

// openPool starts the worker's share of the concurrency limits, when it
// has a flow store; granted deliveries go to jobs until ctx ends.
func (w *Worker) openPool(ctx context.Context, jobs chan job) error {
	w.jobs, w.runCtx = jobs, ctx
	w.queue.ms = map[*waiting]struct{}{}
	if w.cfg.Flow == nil {
		return nil
	}
	pool, err := flow.NewPool(ctx, w.cfg.Flow, flow.PoolOptions{OnError: func(name string, err error) {
		w.log.Warn().Err(err).Str("resource", name).Msg("concurrency limit: lease not written; retrying")
	}})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	w.pool = pool
	w.sayUnlimited()
	if fm, ok := w.cfg.Metrics.(SlotMetrics); ok {
		go w.sampleSlots(ctx, fm)
	}
	return nil
}

// sampleSlots tells fm every second what the worker holds of each
// concurrency limit, until ctx ends.
func (w *Worker) sampleSlots(ctx context.Context, fm SlotMetrics) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, s := range w.pool.Stats() {
				fm.Slots(s.Name, s.InUse, s.Waiting)
			}
		}
	}
}

// sayUnlimited logs, once at start, the resources the worker's steps use
// that have no concurrency limit: their steps run unlimited (a limit set
// later binds within a round trip).
func (w *Worker) sayUnlimited() {
	seen := map[string]bool{}
	for _, def := range w.cfg.Registry.All() {
		lim, ok := def.(steps.Limited)
		if !ok {
			continue
		}
		for _, step := range def.StepNames() {
			if r := lim.Uses(step); r != "" && !seen[r] {
				seen[r] = true
				if !w.pool.Limited(r) {
					w.log.Info().Str("resource", r).Msg("no concurrency limit set: steps that use it run unlimited (durable limit set " + r + " --concurrency N)")
				}
			}
		}
	}
}

// closePool gives the pool's slots back to the fleet.
func (w *Worker) closePool() {
	if w.pool != nil {
		w.pool.Close()
	}
}
