package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Hooks see every boundary of a delivery in protocol order: the call's
// boundaries between the step's start and its checkpoint, AfterPublish
// only where a next step is published.
func TestHooksSeeTheBoundariesInOrder(t *testing.T) {
	h := newHarness(t, storeKinds[0])
	var mu sync.Mutex
	var seen []string
	hook := worker.HookFunc(func(_ context.Context, b worker.Boundary, d worker.Delivery) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s/%s/%d/%d:%s", d.Workflow, d.RunID, d.Step, d.Attempt, b))
	})
	type st struct{ Paid int }
	wf := steps.New[st]("hooked", 1)
	done := wf.Ref("done")
	wf.
		Step("pay", func(ctx context.Context, s *steps.Context, state st) (steps.Outcome[st], error) {
			n, err := steps.Call(ctx, s, "pay", nil, func(context.Context) (int, error) { return 7, nil })
			state.Paid = n
			return steps.Next(done, state), err
		}).
		Step("done", func(_ context.Context, _ *steps.Context, state st) (steps.Outcome[st], error) {
			return steps.Complete(state), nil
		})
	h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Hooks = []worker.Hook{hook} })
	h.start("hooked", "hook-1", "")
	h.waitStatus("hook-1", checkpoint.StatusCompleted, 20*time.Second)

	want := []string{
		"hooked/hook-1/1/1:received", "hooked/hook-1/1/1:before-step",
		"hooked/hook-1/1/1:after-call", "hooked/hook-1/1/1:after-record",
		"hooked/hook-1/1/1:after-checkpoint", "hooked/hook-1/1/1:after-publish",
		"hooked/hook-1/2/1:received", "hooked/hook-1/2/1:before-step", "hooked/hook-1/2/1:after-checkpoint",
	}
	// Each delivery's boundaries come in order; two deliveries overlap (step
	// 2 can start before step 1's AfterPublish hook ran), so compare them
	// delivery by delivery. The last step's ack follows its hook: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := slices.Clone(seen)
		mu.Unlock()
		slices.SortStableFunc(got, func(a, b string) int {
			return strings.Compare(a[:strings.LastIndex(a, ":")], b[:strings.LastIndex(b, ":")])
		})
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hooks saw\n%q\nwant\n%q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
