package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// waitFlow is a one-step workflow whose step waits d, as a step waits on
// a network call, counting the steps running meanwhile.
func waitFlow(name string, d time.Duration, running, finished *atomic.Int64) *steps.Workflow[gated] {
	return steps.New[gated](name, 1).
		Step("wait", func(ctx context.Context, s *steps.Context, st gated) (steps.Outcome[gated], error) {
			running.Add(1)
			defer running.Add(-1)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return steps.Outcome[gated]{}, ctx.Err()
			}
			finished.Add(1)
			return steps.Complete(st), nil
		})
}

// A worker that also runs workflows with nothing to do keeps its slots
// busy with the workflow that has a backlog of steps that wait. The
// pullers of the idle workflows used to wait for messages holding every
// free slot (a second per fetch), and the busy workflow's steps waited
// for a slot: 64 slots kept about 7 steps in flight.
func TestIdleWorkflowsLeaveSlotsToBusyOne(t *testing.T) {
	const (
		slots = 16
		runs  = 8 * slots
		wait  = 200 * time.Millisecond
	)
	var running, finished, idle atomic.Int64
	reg := steps.NewRegistry().MustRegister(
		waitFlow("waits", wait, &running, &finished),
		waitFlow("idle-a", wait, &idle, &idle),
		waitFlow("idle-b", wait, &idle, &idle),
	)
	h := newHarness(t, "redis")
	_, stop := h.startWorker(reg, func(c *worker.Config) { c.Concurrency = slots })
	stop() // the consumers exist; the backlog is started with no worker running
	for i := range runs {
		h.start("waits", fmt.Sprintf("w-%d", i), `{}`)
	}
	h.startWorker(reg, func(c *worker.Config) { c.Concurrency = slots })

	// Sample the steps running while the backlog still fills every slot.
	var samples, sum int64
	deadline := time.Now().Add(time.Minute)
	for finished.Load() < runs-2*slots {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d steps finished after a minute", finished.Load(), runs)
		}
		if finished.Load() > 0 || running.Load() > 0 {
			samples++
			sum += running.Load()
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range runs {
		h.waitStatus(fmt.Sprintf("w-%d", i), checkpoint.StatusCompleted, 30*time.Second)
	}
	mean := float64(sum) / float64(samples)
	t.Logf("%d slots, steps of %s: %.1f steps in flight on average (%.0f%% of the slots) over %d samples", slots, wait, mean, 100*mean/slots, samples)
	if mean < 0.75*slots {
		t.Fatalf("%.1f steps in flight on %d slots (%.0f%%), want at least 75%%: slots sit idle", mean, slots, 100*mean/slots)
	}
}
