package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// The floor is the bare pipeline of WORKLOAD.md, with no framework: pull a
// step message from a JetStream durable consumer, SET NX the step's output
// in Redis, publish the next step with a Nats-Msg-Id and wait for the
// PubAck, ack. No run record, no load, no journal: the least any system
// must do to keep step n's output durable before step n+1 starts on these
// parts. The message carries the state, so no step reads anything.
//
// The pipelined floor (floorpipe.go) does the same work per step, batched
// the way a pipeline tuned for throughput would: its own stream, consumer
// and keys, so that the two never share a message.

// floorKind names one floor's stream, consumer, subjects and keys.
type floorKind struct {
	name, stream, consumer, subjects, keys string
}

var (
	syncFloor      = floorKind{name: SystemFloor, stream: "BENCH_FLOOR", consumer: "floor", subjects: "bench.floor.", keys: "floor"}
	pipelinedFloor = floorKind{name: SystemFloorPipelined, stream: "BENCH_FLOORP", consumer: "floorp", subjects: "bench.floorp.", keys: "floorp"}
)

// floorMsg is a floor step message.
type floorMsg struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	State State  `json:"state"`
}

func (k floorKind) subject(run string) string { return k.subjects + run }

// key holds the output of step n of run, written once (SET NX).
func (k floorKind) key(run string, n int) string {
	return k.keys + ":{" + run + "}:cp:" + strconv.Itoa(n)
}

// streamConfig mirrors durable's step stream: file storage, limits
// retention, a 2-minute dedupe window.
func (k floorKind) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       k.stream,
		Subjects:   []string{k.subjects + ">"},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}
}

// consumerConfig mirrors durable's shared consumer.
func (k floorKind) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       k.consumer,
		FilterSubject: k.subjects + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	}
}

// message is step m's message, with Nats-Msg-Id <run>:<step>.
func (k floorKind) message(m floorMsg) (*nats.Msg, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	msg := &nats.Msg{Subject: k.subject(m.RunID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, m.RunID+":"+strconv.Itoa(m.Step))
	return msg, nil
}

// publish publishes step m and waits for the PubAck.
func (k floorKind) publish(ctx context.Context, js jetstream.JetStream, m floorMsg) error {
	msg, err := k.message(m)
	if err != nil {
		return err
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish floor step %s:%d: %w", m.RunID, m.Step, err)
	}
	return nil
}

// setupFloor creates kind's stream and consumer.
func setupFloor(ctx context.Context, js jetstream.JetStream, kind floorKind) (jetstream.Consumer, error) {
	if _, err := js.CreateOrUpdateStream(ctx, kind.streamConfig()); err != nil {
		return nil, fmt.Errorf("%s stream: %w", kind.name, err)
	}
	c, err := js.CreateOrUpdateConsumer(ctx, kind.stream, kind.consumerConfig())
	if err != nil {
		return nil, fmt.Errorf("%s consumer: %w", kind.name, err)
	}
	return c, nil
}

// floorWorker runs the floor pipeline at a given concurrency.
type floorWorker struct {
	js          jetstream.JetStream
	rdb         *redis.Client
	concurrency int
	log         zerolog.Logger
}

// run handles messages until ctx ends, then waits for those in flight.
func (f *floorWorker) run(ctx context.Context, c jetstream.Consumer) error {
	it, err := c.Messages(jetstream.PullMaxMessages(f.concurrency))
	if err != nil {
		return fmt.Errorf("floor consume: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	handleCtx := context.WithoutCancel(ctx)
	sem := make(chan struct{}, f.concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return nil
		}
		if err != nil {
			f.log.Warn().Err(err).Msg("floor: next message")
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f.handle(handleCtx, msg)
		}()
	}
}

func (f *floorWorker) handle(ctx context.Context, msg jetstream.Msg) {
	m, out, doc, ok := floorStep(msg)
	if !ok {
		_ = msg.Term()
		return
	}
	// First writer wins; a floor does not read the winner back on a
	// redelivery (a real system must).
	if err := f.rdb.SetNX(ctx, syncFloor.key(m.RunID, m.Step), doc, 0).Err(); err != nil {
		f.log.Warn().Err(err).Msg("floor: SET NX")
		_ = msg.NakWithDelay(250 * time.Millisecond)
		return
	}
	if m.Step < StepsPerRun {
		if err := syncFloor.publish(ctx, f.js, floorMsg{RunID: m.RunID, Step: m.Step + 1, State: out}); err != nil {
			f.log.Warn().Err(err).Msg("floor: publish next")
			_ = msg.NakWithDelay(250 * time.Millisecond)
			return
		}
	}
	_ = msg.Ack()
}

// floorStep decodes a floor step message and runs its step: the message,
// the step's output and the output's document. ok is false for a message
// that is no floor step.
func floorStep(msg jetstream.Msg) (m floorMsg, out State, doc []byte, ok bool) {
	if err := json.Unmarshal(msg.Data(), &m); err != nil || m.Step < 1 || m.Step > StepsPerRun {
		return m, out, nil, false
	}
	out = Advance(m.State, m.Step)
	doc, err := json.Marshal(out)
	return m, out, doc, err == nil
}
