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

// inFlight counts a workflow's steps running at once and the most seen.
type inFlight struct{ now, peak atomic.Int64 }

func (f *inFlight) enter() {
	n := f.now.Add(1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
}

// chainFlow is a workflow of steps one..n that each wait d, as a step
// waits on a model call, counted in f.
func chainFlow(name string, n int, d time.Duration, f *inFlight) *steps.Workflow[counter] {
	w := steps.New[counter](name, 1)
	for i := 1; i <= n; i++ {
		var next steps.Ref[counter]
		if i < n {
			next = w.Ref(fmt.Sprintf("s%d", i+1))
		}
		w.Step(fmt.Sprintf("s%d", i), func(ctx context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
			f.enter()
			defer f.now.Add(-1)
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return steps.Outcome[counter]{}, ctx.Err()
			}
			if st.N++; i == n {
				return steps.Complete(st), nil
			}
			return steps.Next(next, st), nil
		})
	}
	return w
}

// busyAmongIdle runs a worker of the given slots with one busy workflow
// and idle ones, then a backlog of twice as many runs of the busy
// workflow as there are slots, and returns the most of its steps that ran
// at once. When warm, each idle workflow first runs two one-step runs, one
// after the other, of a step that returns at once: its puller learns from
// the first that its steps are fast and takes the second on a
// subscription it keeps open from then on.
func busyAmongIdle(t *testing.T, kind string, slots, idle int, warm bool) int64 {
	const (
		depth = 3
		wait  = 200 * time.Millisecond
	)
	var busy, quiet inFlight
	reg := steps.NewRegistry().MustRegister(chainFlow("busy", depth, wait, &busy))
	for i := range idle {
		reg.MustRegister(chainFlow(fmt.Sprintf("idle-%d", i), 1, 0, &quiet))
	}
	h := newHarness(t, kind)
	h.startWorker(reg, func(c *worker.Config) { c.Concurrency = slots })
	rounds := 0
	if warm {
		rounds = 2
	}
	for round := range rounds {
		for i := range idle {
			h.start(fmt.Sprintf("idle-%d", i), fmt.Sprintf("warm-%d-%d", round, i), `{}`)
		}
		for i := range idle {
			h.waitStatus(fmt.Sprintf("warm-%d-%d", round, i), checkpoint.StatusCompleted, 30*time.Second)
		}
	}
	began := time.Now()
	n := 2 * slots
	for i := range n {
		h.start("busy", fmt.Sprintf("b-%d", i), `{}`)
	}
	for i := range n {
		h.waitStatus(fmt.Sprintf("b-%d", i), checkpoint.StatusCompleted, 2*time.Minute)
	}
	took := time.Since(began)
	t.Logf("%d slots, %d idle workflows (warm %v): %d runs of %d steps of %s took %s (%.1fs with every slot busy), at most %d steps at once",
		slots, idle, warm, n, depth, wait, took.Round(10*time.Millisecond), (time.Duration(n*depth) * wait / time.Duration(slots)).Seconds(), busy.peak.Load())
	return busy.peak.Load()
}

// A worker with fewer slots than workflows runs its busy workflow on all
// of them. The pullers of the idle workflows used to wait for messages
// holding a slot each, a second per fetch: with 4 slots and 6 idle
// workflows the busy one ran one step at a time, 24 steps of 200ms in 17s.
func TestIdleWorkflowsLeaveEverySlotToBusyOne(t *testing.T) {
	const slots = 4
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			// Slots, not time: a noisy machine slows the steps but cannot
			// keep them from overlapping; fewer than slots-1 at once means
			// slots were held by pullers with nothing to start.
			if peak := busyAmongIdle(t, kind, slots, 6, false); peak < slots-1 {
				t.Fatalf("at most %d steps of the busy workflow ran at once on %d slots, want at least %d", peak, slots, slots-1)
			}
		})
	}
}

// The same once the idle workflows have run fast steps, so that their
// pullers keep a subscription open rather than fetch: waiting on it used
// to hold a slot for as long as the workflow stayed idle, and 24 idle
// workflows left 8 of 32 slots to the busy one.
func TestIdleStreamingWorkflowsLeaveSlotsToBusyOne(t *testing.T) {
	const slots, idle = 32, 24
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			if peak := busyAmongIdle(t, kind, slots, idle, true); peak < slots*3/4 {
				t.Fatalf("at most %d steps of the busy workflow ran at once on %d slots, want at least %d", peak, slots, slots*3/4)
			}
		})
	}
}
