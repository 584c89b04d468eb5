package queue

import (
	"context"
	"fmt"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// PublishTimeout bounds the wait for PubAcks when the context has no
// deadline: JetStream's own default for a synchronous publish.
const PublishTimeout = 5 * time.Second

// StepMessage is step message m for the step stream, under message id msgID.
// Bodies are encoded with github.com/go-json-experiment/json/v1:
// encoding/json's output, byte for byte, faster.
func StepMessage(m StepMsg, msgID string) (*nats.Msg, error) {
	data, err := jsonv1.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: StepSubject(m.Workflow, m.RunID), Data: data, Header: msgIDHeader(msgID)}, nil
}

// StatusMessage is the status event of run as stored at its revision, for
// the event stream (see StatusEvent).
func StatusMessage(run checkpoint.Run) (*nats.Msg, error) {
	ev := StatusEvent{RunID: run.ID, Workflow: run.Workflow, Status: string(run.Status), Step: run.Step,
		StepName: run.StepName, Error: run.Error, Rev: run.Rev, At: run.UpdatedAt}
	return EventMessage(run.Workflow, string(run.Status), statusID(run), ev)
}

func statusID(run checkpoint.Run) string {
	return fmt.Sprintf("%s:status:%d", run.ID, run.Rev)
}

// EventMessage is a run event of kind with body, for the event stream,
// deduplicated by id.
func EventMessage(workflow, kind, id string, body any) (*nats.Msg, error) {
	data, err := jsonv1.Marshal(body)
	if err != nil {
		return nil, err
	}
	return &nats.Msg{Subject: EventSubject(workflow, kind), Data: data, Header: msgIDHeader(id)}, nil
}

// msgIDHeader is a header of message id id alone. The header's name is
// in its canonical form already, which Header.Set would make again.
func msgIDHeader(id string) nats.Header {
	return nats.Header{jetstream.MsgIDHeader: []string{id}}
}

// expired is a channel that is always ready: the timeout of PublishAll
// once its timer has fired.
var expired = func() chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// Publication is what became of one message of PublishAll: its PubAck, or
// why there is none.
type Publication struct {
	Ack *jetstream.PubAck
	Err error
}

// PublishAll publishes msgs in their order without waiting between them
// (JetStream's asynchronous publish: the connection writes them together),
// then waits for every PubAck, up to PublishTimeout when ctx has no
// deadline. The k-th Publication is msgs[k]'s; a nil message is skipped
// (its Publication is empty). The messages are sent in order, but streams
// store them independently: a message that must be stored before another
// is published, and its PubAck awaited, first. A message the asynchronous
// queue has no room for (other publishes on the same JetStream context
// stalled it) is published on its own. Give the JetStream context
// jetstream.WithPublishAsyncTimeout (pkg/service does): without it nats.go
// keeps a PubAck that never comes pending until the connection closes.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs ...*nats.Msg) []Publication {
	out := make([]Publication, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for k, msg := range msgs {
		if msg == nil {
			continue
		}
		if futures[k], out[k].Err = js.PublishMsgAsync(msg); out[k].Err != nil {
			out[k].Ack, out[k].Err = js.PublishMsg(ctx, msg)
		}
	}
	// A plain timer, not context.WithTimeout: a derived context registers
	// with its parent, which cost 4% of a worker's CPU per step.
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(PublishTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for k, f := range futures {
		if f == nil {
			continue
		}
		// What has arrived counts first: once the timer fired, the
		// timeout case below is always ready and a select picks at random.
		select {
		case out[k].Ack = <-f.Ok():
			continue
		case out[k].Err = <-f.Err():
			continue
		default:
		}
		select {
		case out[k].Ack = <-f.Ok():
		case out[k].Err = <-f.Err():
		case <-ctx.Done():
			out[k].Err = fmt.Errorf("no PubAck: %w", ctx.Err())
		case <-timeout:
			out[k].Err = fmt.Errorf("no PubAck within %s: %w", PublishTimeout, context.DeadlineExceeded)
			timeout = expired // a timer fires once: the later waits end now too
		}
	}
	return out
}
