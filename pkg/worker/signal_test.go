package worker_test

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

// A step that waits again after its wait expired (a reminder) parks again
// rather than spinning on the expiry, and the signal that comes later
// completes it.
func TestSignalWaitAgainAfterExpiry(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var expiries atomic.Int64
			wf := steps.New[fanState]("remind", 1).
				Signals("go").
				Step("await", func(_ context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
					sig, err := s.Signal("go")
					switch {
					case errors.Is(err, steps.ErrSignalExpired):
						expiries.Add(1)
						return steps.AwaitSignal[fanState]("go", time.Hour), nil
					case err != nil:
						return steps.Outcome[fanState]{}, err
					case sig == nil:
						return steps.AwaitSignal[fanState]("go", time.Hour), nil
					}
					return steps.Complete(st), nil
				})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
			ctx := context.Background()
			f.Start("remind", "rem-1", "")
			first := f.WaitStatus("rem-1", checkpoint.StatusWaiting, 30*time.Second)
			if res, err := f.Client.Expire(ctx, "rem-1", time.Now().Add(2*time.Hour)); err != nil || res.Action != client.ExpireSignal {
				t.Fatalf("expire: %+v %v", res, err)
			}
			var again checkpoint.Run
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				again = f.Get("rem-1")
				if (again.Status == checkpoint.StatusWaiting && again.Rev > first.Rev+1) || time.Now().After(deadline) {
					break
				}
			}
			if again.Status != checkpoint.StatusWaiting || expiries.Load() != 1 {
				t.Fatalf("after the expiry: %s, %d expiries seen; want waiting again after one", again.Status, expiries.Load())
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "rem-1", Name: "go", ID: "go-1"}); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("rem-1", checkpoint.StatusCompleted, 30*time.Second)
			if expiries.Load() != 1 {
				t.Fatalf("%d expiries seen, want 1", expiries.Load())
			}
		})
	}
}
