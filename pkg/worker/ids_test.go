package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// A parent whose children ended died at the step they resumed; an
// operator redrives it within the stream's duplicate window. The redrive
// waits for the children again, they have all ended, and the step is
// published again: under an id of the new generation, not the first
// resume's, which the stream would drop, leaving the run running with no
// message (issue 23 item 3). No scheduler runs: nothing would repair it.
func TestRedriveAfterChildrenResumedWithinDuplicateWindow(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var fails atomic.Int64
			kid := steps.New[num]("kid", 1).
				Step("only", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			parent := steps.New[num]("elder", 1)
			after := parent.Ref("after")
			parent.
				Step("start", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.StartChildren(after, st, steps.Child{Workflow: "kid"}, steps.Child{Workflow: "kid"}), nil
				}).
				Step("after", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					if fails.Add(1) == 1 {
						return steps.Outcome[num]{}, steps.Permanent(errors.New("the ledger is closed"))
					}
					return steps.Complete(st), nil
				})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(kid, parent), nil)
			f.Start("elder", "elder-1", "")
			dead := f.WaitStatus("elder-1", checkpoint.StatusDead, 30*time.Second)
			if dead.Step != 2 {
				t.Fatalf("dead at step %d, want 2", dead.Step)
			}
			if _, err := f.Client.Redrive(context.Background(), "elder-1", "oncall"); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("elder-1", checkpoint.StatusCompleted, 20*time.Second)
		})
	}
}
