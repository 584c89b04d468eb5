package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
)

// A decision that comes after the run moved on publishes no resume the
// run does not owe. The run is approved, then waits at the same step for
// a signal and is resumed by it (a generation later); while the step
// runs, a late decision arrives. Before the fix it published the step
// again under the run's new generation, an id never minted: the step ran
// a second time beside the signal's resume (found by TestModel, seed 98,
// in pkg/transition).
func TestLateDecisionPublishesNothingNew(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var afterSignal atomic.Int64
			release := make(chan struct{})
			flow := steps.New[state]("late", 1)
			goSig := flow.Signal("go")
			flow.Step("ask", func(ctx context.Context, s *steps.Context, st state) (steps.Outcome[state], error) {
				d, wait, err := steps.Decision[state](s, steps.ApprovalRequest{Payload: map[string]int{"amount": 10}, Group: "adjusters"})
				if d == nil {
					return wait, err
				}
				sig, wait, err := steps.Recv(s, goSig, time.Hour)
				if sig == nil {
					return wait, err
				}
				afterSignal.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
					return steps.Outcome[state]{}, ctx.Err()
				}
				return steps.Complete(st), nil
			})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
			ctx := context.Background()
			f.Start("late", "late-1", "")
			f.WaitStatus("late-1", checkpoint.StatusWaiting, 10*time.Second)
			if _, err := f.Client.Decide(ctx, client.Decision{RunID: "late-1", By: "ann"}); err != nil {
				t.Fatal(err)
			}
			waiting := f.WaitStatus("late-1", checkpoint.StatusWaiting, 10*time.Second)
			if waiting.Wait.Kind != checkpoint.WaitSignal {
				t.Fatalf("after the decision the run waits for %+v, want the signal", waiting.Wait)
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "late-1", Name: "go", By: "bot"}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for afterSignal.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if afterSignal.Load() != 1 {
				t.Fatal("the step did not run after the signal")
			}
			// The late decision: refused, and nothing published.
			if _, err := f.Client.Decide(ctx, client.Decision{RunID: "late-1", By: "bob"}); !errors.Is(err, client.ErrNotWaiting) {
				t.Fatalf("late decision: %v, want ErrNotWaiting", err)
			}
			time.Sleep(time.Second) // a step published again would be delivered by now
			close(release)
			f.WaitStatus("late-1", checkpoint.StatusCompleted, 10*time.Second)
			if n := afterSignal.Load(); n != 1 {
				t.Errorf("the step ran %d times after the signal, want once: the late decision published it again", n)
			}
		})
	}
}
