package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/transition"
)

// ExpireOutcome is what ExpireMany did for one run.
type ExpireOutcome struct {
	ID string
	ExpireResult
	// Err is set when the run could not be read or changed, or the message
	// its change owes was not published: the wait is for a later pass,
	// which publishes that message again if the change was stored. It
	// wraps ErrNotFound for a run that does not exist.
	Err error
}

// applyWorkers bounds the goroutines of one ExpireMany that read and
// change runs: enough for the Redis store to send their calls as
// pipelines, few enough that each handles several runs with the stack the
// first one grew.
const applyWorkers = 64

// ExpireMany is Expire for the runs of ids, all due at now, at once: the
// runs are read and changed concurrently (a store that pipelines, as the
// Redis one does, makes a few round trips of it), then their status
// events are published together (async publish), then, once the stream
// has acknowledged those, the messages their changes owe, and ExpireMany
// waits for every PubAck. Each change is still its own compare-and-set on
// its own run, and each run's event still goes before its resumed step's
// message. The outcomes are in the order of ids.
func (c *Client) ExpireMany(ctx context.Context, ids []string, now time.Time) []ExpireOutcome {
	es := make([]expiry, len(ids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(ids), applyWorkers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(ids); i = int(next.Add(1) - 1) {
				es[i] = c.applyExpiry(ctx, ids[i], now)
			}
		}()
	}
	wg.Wait()

	// Status events are best effort, as in Expire: a failed one costs
	// nothing more. They are awaited only so that none follows its run's
	// step message.
	events := make([]*nats.Msg, len(es))
	for i, e := range es {
		if e.err == nil && e.changed {
			events[i], _ = queue.StatusMessage(e.stored)
		}
	}
	c.publishAll(ctx, events)

	owedMsgs := make([]*nats.Msg, len(es))
	for i := range es {
		if es[i].err == nil {
			owedMsgs[i], es[i].err = owedMessage(es[i].stored, es[i].owed)
			if es[i].changed && es[i].err == nil {
				// The expiry is a span of the run's trace; what it owes
				// continues from it.
				sctx, span := runSpan(ctx, es[i].stored, "durable.expire", attribute.String("durable.action", es[i].res.Action))
				if owedMsgs[i] != nil {
					queue.InjectTrace(sctx, owedMsgs[i])
				}
				span.End()
			}
		}
	}
	for i, err := range c.publishAll(ctx, owedMsgs) {
		if err != nil {
			es[i].err = err
		}
	}
	out := make([]ExpireOutcome, len(ids))
	for i, e := range es {
		out[i] = ExpireOutcome{ID: ids[i], ExpireResult: e.res, Err: e.err}
	}
	return out
}

// publishAll publishes the messages of msgs that are not nil together
// (queue.PublishAll) and returns when the stream acknowledged each, or
// refused it, or the wait ran out: errs[i] is msgs[i]'s error.
func (c *Client) publishAll(ctx context.Context, msgs []*nats.Msg) (errs []error) {
	errs = make([]error, len(msgs))
	for i, p := range queue.PublishAll(ctx, c.js, msgs...) {
		if p.Err != nil {
			errs[i] = fmt.Errorf("publish %s: %w", msgs[i].Subject, p.Err)
		}
	}
	return errs
}

// owedMessage is the message an expiry's command stands for, nil when
// it owes none.
func owedMessage(run checkpoint.Run, cmd transition.Command) (*nats.Msg, error) {
	switch o := cmd.(type) {
	case transition.PublishStep:
		m := queue.StepMsg{RunID: run.ID, Workflow: run.Workflow, Step: run.Step, Name: run.StepName}
		return queue.StepMessage(m, o.MsgID)
	case transition.PublishReminder:
		return queue.EventMessage(run.Workflow, "reminder", o.MsgID, o.Reminder)
	}
	return nil, nil
}
