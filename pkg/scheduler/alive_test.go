package scheduler_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// A step still running past --stuck-after is alive, not stuck: its
// worker's heartbeats are progress, so the scheduler's repair does not
// publish it again for a second worker to run the body beside the first
// (which would pay a journaled model call twice). Issue 23 item 4.
func TestRepairLeavesAliveStepAlone(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var bodies atomic.Int64
			wf := steps.New[state]("slow", 1).
				Step("think", func(ctx context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
					bodies.Add(1)
					select {
					case <-time.After(3 * time.Second):
					case <-ctx.Done():
						return steps.Outcome[state]{}, ctx.Err()
					}
					return steps.Complete(st), nil
				})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) {
				c.AckWait, c.StepTimeout = 600*time.Millisecond, 5*time.Second
			})
			f.StartScheduler(func(c *scheduler.Config) {
				c.StuckAfter, c.StepTimeout, c.RepairInterval = 700*time.Millisecond, 500*time.Millisecond, 200*time.Millisecond
			})
			f.Start("slow", "slow-1", "")
			f.WaitStatus("slow-1", checkpoint.StatusCompleted, 30*time.Second)
			time.Sleep(time.Second) // a copy published by a repair would run by now
			if n := bodies.Load(); n != 1 {
				t.Fatalf("the step's body ran %d times, want 1: a repair published a step that was alive", n)
			}
		})
	}
}

// The scheduler refuses a --stuck-after at or below the workers' step
// timeout: any step running longer than it would be published again
// while alive. Its default is above the default step timeout.
func TestStuckAfterAboveStepTimeout(t *testing.T) {
	f := testfleet.New(t, "redis")
	for _, c := range []scheduler.Config{
		{Client: f.Client, StuckAfter: 5 * time.Minute},
		{Client: f.Client, StuckAfter: 10 * time.Minute},
		{Client: f.Client, StuckAfter: time.Minute, StepTimeout: 2 * time.Minute},
	} {
		if _, err := scheduler.New(c); err == nil || !strings.Contains(err.Error(), "step timeout") {
			t.Errorf("New(stuck after %s, step timeout %s) = %v, want a refusal naming the step timeout", c.StuckAfter, c.StepTimeout, err)
		}
	}
	if _, err := scheduler.New(scheduler.Config{Client: f.Client}); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if _, err := scheduler.New(scheduler.Config{Client: f.Client, StuckAfter: 3 * time.Minute, StepTimeout: 2 * time.Minute}); err != nil {
		t.Errorf("stuck after 3m over a 2m step timeout: %v", err)
	}
}
