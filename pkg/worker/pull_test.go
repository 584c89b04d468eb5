package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// gated is a one-step workflow whose step takes the input's "ms", or
// blocks until the gate opens when ms is negative.
type gated struct {
	MS int `json:"ms"`
}

func gatedFlow(gate <-chan struct{}) *steps.Workflow[gated] {
	return steps.New[gated]("gated", 1).
		Step("work", func(ctx context.Context, s *steps.Context, st gated) (steps.Outcome[gated], error) {
			var wait <-chan time.Time
			if st.MS >= 0 {
				wait = time.After(time.Duration(st.MS) * time.Millisecond)
			}
			select {
			case <-wait:
			case <-gate:
			case <-ctx.Done():
				return steps.Outcome[gated]{}, ctx.Err()
			}
			return steps.Complete(st), nil
		})
}

// ackPending is how many of the workflow's messages the worker holds:
// delivered and not acked.
func ackPending(t *testing.T, h *harness) int {
	t.Helper()
	c, err := h.js.Consumer(context.Background(), queue.StepStream, queue.ConsumerName("gated"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending
}

// runPrefetch trains the worker's step clock with runs of stepMS, then
// blocks all its slots and returns the most messages it held meanwhile.
func runPrefetch(t *testing.T, stepMS, train int) int {
	const slots = 8
	gate := make(chan struct{})
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(gatedFlow(gate)), func(c *worker.Config) { c.Concurrency = slots })
	for i := range train {
		h.start("gated", fmt.Sprintf("train-%d", i), fmt.Sprintf(`{"ms":%d}`, stepMS))
	}
	for i := range train {
		h.waitStatus(fmt.Sprintf("train-%d", i), checkpoint.StatusCompleted, 30*time.Second)
	}
	const blocked = 3 * slots
	for i := range blocked {
		h.start("gated", fmt.Sprintf("blocked-%d", i), `{"ms":-1}`)
	}
	held := 0
	testenv.Eventually(t, 10*time.Second, "every slot busy", func() bool {
		held = max(held, ackPending(t, h))
		return held >= slots
	})
	// Sample for longer than a pull takes to arrive.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		held = max(held, ackPending(t, h))
	}
	close(gate)
	for i := range blocked {
		h.waitStatus(fmt.Sprintf("blocked-%d", i), checkpoint.StatusCompleted, 30*time.Second)
	}
	return held
}

// A worker whose steps take seconds takes exactly its free slots: no
// message waits in it for a slot while its ack timer runs.
func TestSlowStepsAreNotPrefetched(t *testing.T) {
	if held := runPrefetch(t, 2500, 8); held != 8 {
		t.Fatalf("with 2.5s steps the worker held %d messages on 8 slots, want 8", held)
	}
}

// A worker whose steps take milliseconds keeps messages ready ahead of
// its free slots, so a slot that frees starts the next step at once.
func TestFastStepsArePrefetched(t *testing.T) {
	if held := runPrefetch(t, 0, 64); held <= 8 {
		t.Fatalf("with fast steps the worker held %d messages on 8 slots, want more (prefetched)", held)
	}
}
