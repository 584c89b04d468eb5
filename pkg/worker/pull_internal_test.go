package worker

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
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
			t.Parallel() // its own nats-server; the puller waits out missed heartbeats
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			js, cc, stale := newConsumer(t, "gone")
			if err := js.DeleteConsumer(ctx, queue.StepStream, cc.Durable); err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, queue.StepSubject("gone", "r-1"), []byte("step")); err != nil {
				t.Fatal(err)
			}
			r := startPuller(ctx, js, "gone", stale, mode)
			takeStep(t, r, "the step waiting on the deleted consumer's stream")
			cancel()
			<-r.done
			if _, err := js.Consumer(context.Background(), queue.StepStream, cc.Durable); err != nil {
				t.Fatalf("consumer not created again: %v", err)
			}
		})
	}
}

// The step stream deleted under a puller (by an operator, or lost with a
// server that restarted without its store) takes the consumer with it. A
// pull then finds no responders or is told the consumer was deleted, and
// the server answers "stream not found" when asked about the consumer. The
// puller provisions the streams again, creates its consumer and pulls the
// steps published from then on. The steps that were in the deleted stream
// are gone with it: the scheduler's repair pass republishes a run's step.
func TestPullerProvisionsStepStreamDeletedUnderIt(t *testing.T) {
	for _, tc := range []struct{ mode, when string }{
		{"fetch", "between pulls"}, {"stream", "between pulls"},
		{"fetch", "during a pull"}, {"stream", "during a pull"},
	} {
		t.Run(tc.mode+" "+tc.when, func(t *testing.T) {
			t.Parallel() // its own nats-server; the puller waits out missed heartbeats
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			js, cc, c := newConsumer(t, "lost")
			var r *pullerRun
			if tc.when == "during a pull" {
				r = startPuller(ctx, js, "lost", c, tc.mode)
				testenv.Eventually(t, 10*time.Second, "a pull request waiting on the consumer", func() bool {
					ci, err := c.Info(ctx)
					return err == nil && ci.NumWaiting > 0
				})
			}
			if err := js.DeleteStream(ctx, queue.StepStream); err != nil {
				t.Fatal(err)
			}
			if r == nil {
				r = startPuller(ctx, js, "lost", c, tc.mode)
			}
			// A step can be published once the stream is back.
			testenv.Eventually(t, 30*time.Second, "the step stream provisioned again", func() bool {
				pctx, pcancel := context.WithTimeout(ctx, time.Second)
				defer pcancel()
				_, err := js.Publish(pctx, queue.StepSubject("lost", "r-1"), []byte("step"), jetstream.WithMsgID("r-1:1"))
				return err == nil
			})
			takeStep(t, r, "the step published on the provisioned stream")
			cancel()
			<-r.done
			if _, err := js.Consumer(context.Background(), queue.StepStream, cc.Durable); err != nil {
				t.Fatalf("consumer not created again: %v", err)
			}
		})
	}
}

// newConsumer starts a NATS server with the streams and workflow's
// consumer on it.
func newConsumer(t *testing.T, workflow string) (jetstream.JetStream, jetstream.ConsumerConfig, jetstream.Consumer) {
	t.Helper()
	_, js := testenv.StartNATS(t).Connect(t)
	ctx := context.Background()
	if err := queue.Provision(ctx, js, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	cc := queue.ConsumerConfig(workflow, 2*time.Second, 100)
	c, err := queue.EnsureConsumer(ctx, js, cc)
	if err != nil {
		t.Fatal(err)
	}
	return js, cc, c
}

// pullerRun is a puller running for a test: closed when its run returns.
type pullerRun struct {
	done chan struct{}
	w    *Worker
	jobs chan job
}

// startPuller runs a puller of workflow on c until ctx ends. In "stream"
// mode its step clock asks for a prefetch of 16, so it keeps one
// subscription open; in "fetch" mode it fetches the free slots.
func startPuller(ctx context.Context, js jetstream.JetStream, workflow string, c jetstream.Consumer, mode string) *pullerRun {
	w := &Worker{cfg: Config{JetStream: js, AckWait: 2 * time.Second, MaxAckPending: 100, Concurrency: 16},
		log: zerolog.Nop(), sem: make(chan struct{}, 16), heartbeat: 2 * time.Second / 3}
	clock := &stepClock{}
	if mode == "stream" {
		clock.mean.Store(int64(time.Millisecond))
	}
	r := &pullerRun{done: make(chan struct{}), w: w, jobs: make(chan job, 16)}
	p := &puller{w: w, workflow: workflow, c: c, maxBatch: 16, jobs: r.jobs, clock: clock}
	go func() { defer close(r.done); p.run(ctx) }()
	return r
}

// takeStep waits up to 30s for the puller to hand over a message "step"
// and acks it.
func takeStep(tb testing.TB, r *pullerRun, what string) {
	tb.Helper()
	select {
	case j := <-r.jobs:
		if string(j.msg.Data()) != "step" {
			tb.Fatalf("got %q", j.msg.Data())
		}
		_ = j.msg.Ack()
		r.w.release(1)
	case <-time.After(30 * time.Second):
		tb.Fatalf("%s was not delivered in 30s", what)
	}
}
