package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
)

// PubAcks that never come: every message of PublishAll fails after
// PublishTimeout (not only the first to wait on the timer), the others'
// are acked, and a nil message is skipped.
func TestPublishAllBoundsEveryWait(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: embedded nats-server")
	}
	nc, js := testenv.StartNATS(t).Connect(t)
	ctx := context.Background()
	if err := queue.Provision(ctx, js, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	// A plain subscriber that never answers stands for a stream whose
	// PubAcks are lost.
	sub, err := nc.SubscribeSync("silent.>")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	step, err := queue.StepMessage(queue.StepMsg{RunID: "pa-1", Workflow: "w", Step: 1, Name: "a"}, "pa-1:1")
	if err != nil {
		t.Fatal(err)
	}
	silent := func(s string) *nats.Msg { return &nats.Msg{Subject: "silent." + s, Data: []byte("{}")} }
	began := time.Now()
	ps := queue.PublishAll(ctx, js, silent("a"), step, nil, silent("b"), silent("c"))
	took := time.Since(began)
	if took < queue.PublishTimeout || took > queue.PublishTimeout+3*time.Second {
		t.Errorf("PublishAll took %v, want about %v", took, queue.PublishTimeout)
	}
	for _, k := range []int{0, 3, 4} {
		if !errors.Is(ps[k].Err, context.DeadlineExceeded) {
			t.Errorf("message %d: %v, want a deadline error", k, ps[k].Err)
		}
	}
	if ps[1].Err != nil || ps[1].Ack == nil || ps[1].Ack.Stream != queue.StepStream {
		t.Errorf("step message: ack %+v, err %v", ps[1].Ack, ps[1].Err)
	}
	if ps[2] != (queue.Publication{}) {
		t.Errorf("nil message: %+v, want nothing", ps[2])
	}
}
