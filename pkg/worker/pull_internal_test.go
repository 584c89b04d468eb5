package worker

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/queue"
	"github.com/durable-run/durable/internal/testenv"
)

func TestPrefetchFollowsStepTime(t *testing.T) {
	var c stepClock
	if n := c.prefetch(16, 16); n != 0 {
		t.Fatalf("prefetch before any step = %d, want 0 (fetch the free slots)", n)
	}
	cases := []struct {
		mean        time.Duration
		slots, want int
	}{
		{time.Millisecond, 128, 128}, // capped at the limit
		{100 * time.Millisecond, 16, 16},
		{time.Second, 16, 16},     // 16 slots start 16 steps a second
		{4 * time.Second, 16, 4},  // one slot frees every 250ms
		{30 * time.Second, 16, 0}, // a minute-long model call: no prefetch
	}
	for _, tc := range cases {
		c.mean.Store(int64(tc.mean))
		if n := c.prefetch(tc.slots, tc.slots); n != tc.want {
			t.Errorf("mean %s, %d slots: prefetch %d, want %d", tc.mean, tc.slots, n, tc.want)
		}
	}
}

func TestStepClockAverages(t *testing.T) {
	var c stepClock
	c.observe(10 * time.Millisecond)
	if got := time.Duration(c.mean.Load()); got != 10*time.Millisecond {
		t.Fatalf("first observation: mean %s, want 10ms", got)
	}
	for range 200 {
		c.observe(time.Second)
	}
	if got := time.Duration(c.mean.Load()); got < 990*time.Millisecond || got > time.Second {
		t.Fatalf("after 200 steps of 1s: mean %s, want ~1s", got)
	}
}

// A consumer deleted while none of the puller's pulls waited on it gives no
// "consumer deleted" status: the next fetch finds no responders, an open
// subscription stops getting heartbeats. The puller asks the server, creates
// the consumer again and takes the step waiting on the stream.
func TestPullerRecreatesConsumerDeletedBetweenPulls(t *testing.T) {
	for _, mode := range []string{"fetch", "stream"} {
		t.Run(mode, func(t *testing.T) {
			n := testenv.StartNATS(t)
			_, js := n.Connect(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := queue.Provision(ctx, js, queue.Config{}); err != nil {
				t.Fatal(err)
			}
			cc := queue.ConsumerConfig("gone", 2*time.Second, 100)
			stale, err := queue.EnsureConsumer(ctx, js, cc)
			if err != nil {
				t.Fatal(err)
			}
			if err := js.DeleteConsumer(ctx, queue.StepStream, cc.Durable); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, queue.StepSubject("gone", "r-1"), []byte("step")); err != nil {
				t.Fatal(err)
			}
			w := &Worker{cfg: Config{JetStream: js, AckWait: 2 * time.Second, MaxAckPending: 100, Concurrency: 16},
				log: zerolog.Nop(), sem: make(chan struct{}, 16)}
			clock := &stepClock{}
			if mode == "stream" {
				clock.mean.Store(int64(time.Millisecond)) // prefetch 16: one open subscription
			}
			jobs := make(chan job, 16)
			p := &puller{w: w, workflow: "gone", c: stale, maxBatch: 16, jobs: jobs, clock: clock}
			done := make(chan struct{})
			go func() { defer close(done); p.run(ctx) }()
			select {
			case j := <-jobs:
				if string(j.msg.Data()) != "step" {
					t.Fatalf("got %q", j.msg.Data())
				}
				_ = j.msg.Ack()
				w.release(1)
			case <-time.After(30 * time.Second):
				t.Fatal("the step waiting on the deleted consumer's stream was not delivered in 30s")
			}
			cancel()
			<-done
			if _, err := js.Consumer(context.Background(), queue.StepStream, cc.Durable); err != nil {
				t.Fatalf("consumer not created again: %v", err)
			}
		})
	}
}
