package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// The pipelined floor does the floor's work per step (SET NX the output,
// publish the next step with a Nats-Msg-Id, ack once both are durable)
// the way a pipeline tuned for throughput does it: messages are taken in
// batches as they arrive, a batch's SET NXs go to Redis as one pipeline,
// its next steps are published asynchronously and their PubAcks collected
// together, then its messages are acked one after another without waiting
// (the acks share the connection's writes). floorBatchers batches are in
// flight at once, so one waits on the servers while another is prepared.
const (
	floorBatchers = 4
	// floorMaxBatch bounds one batch; a batch takes what has arrived.
	floorMaxBatch = 64
)

// pipelinedFloorWorker runs the pipelined floor.
type pipelinedFloorWorker struct {
	js          jetstream.JetStream
	rdb         *redis.Client
	concurrency int
	log         zerolog.Logger
}

// run handles messages until ctx ends, then finishes the batches in flight.
func (f *pipelinedFloorWorker) run(ctx context.Context, c jetstream.Consumer) error {
	in := make(chan jetstream.Msg, f.concurrency)
	cc, err := c.Consume(func(m jetstream.Msg) { in <- m }, jetstream.PullMaxMessages(f.concurrency))
	if err != nil {
		return fmt.Errorf("%s consume: %w", pipelinedFloor.name, err)
	}
	handleCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range floorBatchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				batch, ok := takeBatch(ctx, in)
				if !ok {
					return
				}
				f.handle(handleCtx, batch)
			}
		}()
	}
	<-ctx.Done()
	cc.Stop()
	wg.Wait()
	return nil
}

// takeBatch waits for a message, then takes those that arrived with it,
// up to floorMaxBatch. ok is false once ctx ends.
func takeBatch(ctx context.Context, in <-chan jetstream.Msg) (batch []jetstream.Msg, ok bool) {
	select {
	case <-ctx.Done():
		return nil, false
	case m := <-in:
		batch = append(batch, m)
	}
	for len(batch) < floorMaxBatch {
		select {
		case m := <-in:
			batch = append(batch, m)
		default:
			return batch, true
		}
	}
	return batch, true
}

// handle runs one batch: SET NX pipelined, next steps published
// asynchronously, every PubAck awaited, then the acks. A message whose
// write or publish failed is handed back; the others are acked.
func (f *pipelinedFloorWorker) handle(ctx context.Context, batch []jetstream.Msg) {
	type item struct {
		msg    jetstream.Msg
		m      floorMsg
		out    State
		set    *redis.BoolCmd
		pubAck jetstream.PubAckFuture
		failed bool
	}
	items := make([]item, 0, len(batch))
	pipe := f.rdb.Pipeline()
	for _, msg := range batch {
		m, out, doc, ok := floorStep(msg)
		if !ok {
			_ = msg.Term()
			continue
		}
		items = append(items, item{msg: msg, m: m, out: out, set: pipe.SetNX(ctx, pipelinedFloor.key(m.RunID, m.Step), doc, 0)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		f.log.Warn().Err(err).Msg("floor-pipelined: SET NX")
	}
	for i := range items {
		it := &items[i]
		if it.failed = it.set.Err() != nil; it.failed || it.m.Step == StepsPerRun {
			continue
		}
		next, err := pipelinedFloor.message(floorMsg{RunID: it.m.RunID, Step: it.m.Step + 1, State: it.out})
		if err == nil {
			it.pubAck, err = f.js.PublishMsgAsync(next)
		}
		it.failed = err != nil
	}
	timeout := time.After(30 * time.Second)
	for i := range items {
		it := &items[i]
		if it.pubAck != nil && !it.failed {
			select {
			case <-it.pubAck.Ok():
			case <-it.pubAck.Err():
				it.failed = true
			case <-timeout:
				it.failed = true
			}
		}
		if it.failed {
			_ = it.msg.NakWithDelay(250 * time.Millisecond)
			continue
		}
		_ = it.msg.Ack()
	}
}
