package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
)

// heldStep starts a puller on a consumer with an ack wait of 2s, lets its
// fetch begin waiting with every slot free, then takes every slot and
// publishes a step: the message reaches the puller with no slot to start
// it in.
func heldStep(t *testing.T, ctx context.Context) (*pullerRun, jetstream.Consumer) {
	t.Helper()
	js, _, c := newConsumer(t, "held")
	r := startPuller(ctx, js, "held", c, "fetch")
	testenv.Eventually(t, 10*time.Second, "the puller waiting on the idle consumer", func() bool {
		ci, err := c.Info(ctx)
		return err == nil && ci.NumWaiting > 0
	})
	for range cap(r.w.sem) {
		r.w.sem <- struct{}{}
	}
	if _, err := js.Publish(ctx, queue.StepSubject("held", "r-1"), []byte("step")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the step delivered to the puller", func() bool {
		ci, err := c.Info(ctx)
		return err == nil && ci.NumAckPending == 1
	})
	return r, c
}

// A message that reaches a puller while every slot is busy waits for one
// with InProgress heartbeats: it is not redelivered however long the slots
// stay busy, and starts once one frees.
func TestMessageWaitingForSlotKeepsItsDelivery(t *testing.T) {
	t.Parallel() // its own nats-server; it waits out two ack waits
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, c := heldStep(t, ctx)
	// Another worker waits on the consumer for two ack waits while every
	// slot stays busy: the server must not give it the step.
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		md, _ := msg.Metadata()
		t.Fatalf("the step waiting for a slot was redelivered to another worker (delivery %d)", md.NumDelivered)
	}
	select {
	case j := <-r.jobs:
		t.Fatalf("step %q handed over with every slot busy", j.msg.Data())
	default:
	}
	r.w.release(1)
	select {
	case j := <-r.jobs:
		md, err := j.msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.NumDelivered != 1 {
			t.Fatalf("step started on delivery %d, want 1", md.NumDelivered)
		}
		_ = j.msg.Ack()
	case <-time.After(10 * time.Second):
		t.Fatal("the step did not start once a slot freed")
	}
	cancel()
	<-r.done
}

// A worker that stops while a message waits in it for a slot hands the
// message back at once, rather than let it wait out its ack wait.
func TestStoppingHandsBackMessageWaitingForSlot(t *testing.T) {
	t.Parallel() // its own nats-server
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, c := heldStep(t, ctx)
	cancel()
	<-r.done
	// Within half the ack wait of its delivery: handed back, not expired.
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		if md, err := msg.Metadata(); err != nil || md.NumDelivered != 2 {
			t.Fatalf("delivery %+v (%v), want the second", md, err)
		}
		_ = msg.Ack()
	}
	if got != 1 {
		t.Fatalf("%d messages within a second of the stop (%v), want the step handed back", got, batch.Error())
	}
}
