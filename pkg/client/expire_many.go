package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
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
			events[i], _ = statusMessage(e.stored)
		}
	}
	c.publishAll(ctx, events)

	owedMsgs := make([]*nats.Msg, len(es))
	for i := range es {
		if es[i].err == nil {
			owedMsgs[i], es[i].err = owedMessage(es[i].stored, es[i].owed)
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

// pubAckWait bounds the wait for the PubAcks of publishAll, as the
// JetStream context's default timeout bounds a synchronous publish: an
// async publish has no timeout of its own unless the context was made
// with one.
const pubAckWait = 5 * time.Second

// publishAll publishes the messages of msgs that are not nil, all at
// once, and returns when the stream acknowledged each (or refused it, or
// pubAckWait passed): errs[i] is msgs[i]'s error. A message the async
// queue has no room for (other publishes of the same JetStream context
// stalled it) is published on its own instead.
func (c *Client) publishAll(ctx context.Context, msgs []*nats.Msg) (errs []error) {
	ctx, cancel := context.WithTimeout(ctx, pubAckWait)
	defer cancel()
	errs = make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		if m == nil {
			continue
		}
		f, err := c.js.PublishMsgAsync(m)
		if err == nil {
			futures[i] = f
			continue
		}
		if _, err = c.js.PublishMsg(ctx, m); err != nil {
			errs[i] = fmt.Errorf("publish %s: %w", m.Subject, err)
		}
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = fmt.Errorf("publish %s: %w", msgs[i].Subject, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("publish %s: no PubAck: %w", msgs[i].Subject, ctx.Err())
		}
	}
	return errs
}

// The messages below are those queue.PublishStep, queue.PublishEvent and
// queue.PublishStatus publish, built for an async publish (a test keeps
// them the same).

// owedMessage is the message o stands for, nil when o owes none.
func owedMessage(run checkpoint.Run, o owed) (*nats.Msg, error) {
	switch {
	case o.stepID != "":
		return stepMessage(run, o.stepID)
	case o.reminder != nil:
		return eventMessage(run.Workflow, "reminder", o.reminderID, o.reminder)
	}
	return nil, nil
}

// stepMessage is the message of the step at run's cursor under msgID.
func stepMessage(run checkpoint.Run, msgID string) (*nats.Msg, error) {
	m := queue.StepMsg{RunID: run.ID, Workflow: run.Workflow, Step: run.Step, Name: run.StepName}
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: queue.StepSubject(m.Workflow, m.RunID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	return msg, nil
}

// eventMessage is a run event of kind, deduplicated by id.
func eventMessage(workflow, kind, id string, body any) (*nats.Msg, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: queue.EventSubject(workflow, kind), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, id)
	return msg, nil
}

// statusMessage is the status event of run as stored at its revision.
func statusMessage(run checkpoint.Run) (*nats.Msg, error) {
	ev := queue.StatusEvent{RunID: run.ID, Workflow: run.Workflow, Status: string(run.Status), Step: run.Step,
		StepName: run.StepName, Error: run.Error, Rev: run.Rev, At: run.UpdatedAt}
	return eventMessage(run.Workflow, string(run.Status), run.ID+":status:"+strconv.FormatUint(run.Rev, 10), ev)
}
