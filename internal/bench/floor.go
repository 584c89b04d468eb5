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
const (
	floorStream   = "BENCH_FLOOR"
	floorConsumer = "floor"
	floorSubjects = "bench.floor."
)

// floorMsg is a floor step message.
type floorMsg struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	State State  `json:"state"`
}

func floorSubject(run string) string { return floorSubjects + run }

// floorKey holds the output of step n of run, written once (SET NX).
func floorKey(run string, n int) string { return "floor:{" + run + "}:cp:" + strconv.Itoa(n) }

// floorStreamConfig mirrors durable's step stream: file storage, limits
// retention, a 2-minute dedupe window.
func floorStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       floorStream,
		Subjects:   []string{floorSubjects + ">"},
		Retention:  jetstream.LimitsPolicy,
		Storage:    jetstream.FileStorage,
		Duplicates: 2 * time.Minute,
	}
}

// floorConsumerConfig mirrors durable's shared consumer.
func floorConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       floorConsumer,
		FilterSubject: floorSubjects + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    -1,
	}
}

// publishFloorStep publishes step m with Nats-Msg-Id <run>:<step> and waits
// for the PubAck.
func publishFloorStep(ctx context.Context, js jetstream.JetStream, m floorMsg) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: floorSubject(m.RunID), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, m.RunID+":"+strconv.Itoa(m.Step))
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish floor step %s:%d: %w", m.RunID, m.Step, err)
	}
	return nil
}

// floorWorker runs the floor pipeline at a given concurrency.
type floorWorker struct {
	js          jetstream.JetStream
	rdb         *redis.Client
	concurrency int
	log         zerolog.Logger
}

func (f *floorWorker) setup(ctx context.Context) (jetstream.Consumer, error) {
	if _, err := f.js.CreateOrUpdateStream(ctx, floorStreamConfig()); err != nil {
		return nil, fmt.Errorf("floor stream: %w", err)
	}
	c, err := f.js.CreateOrUpdateConsumer(ctx, floorStream, floorConsumerConfig())
	if err != nil {
		return nil, fmt.Errorf("floor consumer: %w", err)
	}
	return c, nil
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
	var m floorMsg
	if err := json.Unmarshal(msg.Data(), &m); err != nil || m.Step < 1 || m.Step > StepsPerRun {
		_ = msg.Term()
		return
	}
	out := Advance(m.State, m.Step)
	doc, err := json.Marshal(out)
	if err != nil {
		_ = msg.Term()
		return
	}
	// First writer wins; a floor does not read the winner back on a
	// redelivery (a real system must).
	if err := f.rdb.SetNX(ctx, floorKey(m.RunID, m.Step), doc, 0).Err(); err != nil {
		f.log.Warn().Err(err).Msg("floor: SET NX")
		_ = msg.NakWithDelay(250 * time.Millisecond)
		return
	}
	if m.Step < StepsPerRun {
		if err := publishFloorStep(ctx, f.js, floorMsg{RunID: m.RunID, Step: m.Step + 1, State: out}); err != nil {
			f.log.Warn().Err(err).Msg("floor: publish next")
			_ = msg.NakWithDelay(250 * time.Millisecond)
			return
		}
	}
	_ = msg.Ack()
}
