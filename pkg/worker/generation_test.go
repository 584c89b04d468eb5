package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// gateFlow asks for approval, then pays; a rejection fails the run.
func gateFlow(pays *atomic.Int64) *steps.Workflow[counter] {
	w := steps.New[counter]("gate", 1)
	pay := w.Ref("pay")
	return w.
		Step("ask", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			req := steps.ApprovalRequest{Payload: map[string]int64{"amount": 1840}, Group: "adjusters"}
			d, err := s.Approval(req)
			if err != nil {
				return steps.Outcome[counter]{}, err
			}
			if d == nil {
				return steps.Park[counter](req), nil
			}
			if d.Decision == checkpoint.DecisionRejected {
				return steps.Fail(st, "rejected by "+d.By), nil
			}
			return steps.Next(pay, st), nil
		}).
		Step("pay", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			pays.Add(1)
			return steps.Complete(st), nil
		})
}

// zombieCommit is the commit of an attempt of step 1 that read the run
// before it parked (an older revision, generation 0) and decided to go on
// to "pay": a worker frozen past its ack wait while another parked the run.
func zombieCommit(t *testing.T, h *harness, parked checkpoint.Run) error {
	t.Helper()
	stale := parked
	stale.Status, stale.Wait, stale.Rev, stale.Audit, stale.Resumes = checkpoint.StatusRunning, nil, parked.Rev-1, nil, 0
	next := stale
	next.Step, next.StepName, next.Steps = 2, "pay", 1
	cp := checkpoint.Checkpoint{RunID: parked.ID, Step: 1, Name: "ask", Next: "pay", Status: checkpoint.StatusRunning,
		State: json.RawMessage(`{"n":0}`), Attempt: 1, At: time.Now().UTC(), Gen: 0}
	_, err := h.store.Commit(context.Background(), next, cp)
	return err
}

// A zombie's result from before the park never outlives a rejection,
// whether its commit lands while the run waits or after the decision, on
// either store: the rejected run fails and nothing is paid.
func TestZombieResultDoesNotBypassRejection(t *testing.T) {
	for _, kind := range storeKinds {
		for _, when := range []string{"while waiting", "after the decision"} {
			t.Run(kind+"/"+when, func(t *testing.T) {
				var pays atomic.Int64
				h := newHarness(t, kind)
				ctx := context.Background()
				reg := steps.NewRegistry().MustRegister(gateFlow(&pays))
				_, stop := h.startWorker(reg, nil)
				h.start("gate", "gate-1", "")
				parked := h.waitStatus("gate-1", checkpoint.StatusWaiting, 20*time.Second)
				stop()
				if when == "while waiting" {
					if err := zombieCommit(t, h, parked); err == nil {
						t.Fatal("the zombie's commit succeeded on a parked run")
					}
				}
				if _, err := h.client.Decide(ctx, client.Decision{RunID: "gate-1", By: "ana", Channel: "cli", Reject: true}); err != nil {
					t.Fatal(err)
				}
				if when == "after the decision" {
					if err := zombieCommit(t, h, parked); err == nil {
						t.Fatal("the zombie's commit succeeded on a decided run")
					}
				}
				h.startWorker(reg, nil)
				run := h.waitStatus("gate-1", checkpoint.StatusFailed, 20*time.Second)
				if run.Error != "rejected by ana" || pays.Load() != 0 {
					t.Fatalf("rejected run failed with %q and %d payments, want \"rejected by ana\" and none", run.Error, pays.Load())
				}
			})
		}
	}
}

// A duplicate delivery wrote checkpoint 1 and died before its run write
// (a KV commit is two writes) while this worker ran step 1: its commit
// loses, and it must roll the run forward rather than ack the step with
// the run behind its checkpoint and no message left to move it.
func TestLostCommitRollsTheRunForward(t *testing.T) {
	h := newHarness(t, "kv")
	ctx := context.Background()
	kv, err := h.js.KeyValue(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	flow := steps.New[counter]("lag", 1)
	two := flow.Ref("two")
	flow.
		Step("one", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			if s.Attempt() == 1 {
				cp := checkpoint.Checkpoint{RunID: s.RunID(), Step: 1, Name: "one", State: []byte(`{"n":1}`), Next: "two",
					Status: checkpoint.StatusRunning, Attempt: 1, At: time.Now().UTC()}
				doc, err := json.Marshal(cp)
				if err != nil {
					return steps.Outcome[counter]{}, err
				}
				if _, err := kv.Create(ctx, "cp."+s.RunID()+".1", doc); err != nil {
					return steps.Outcome[counter]{}, err
				}
			}
			st.N++
			return steps.Next(two, st), nil
		}).
		Step("two", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			st.N++
			return steps.Complete(st), nil
		})
	h.startWorker(steps.NewRegistry().MustRegister(flow), nil)
	h.start("lag", "lag-9", "")
	// Without the roll-forward only the scheduler's stuck-run repair
	// (minutes) would move it; none runs here.
	run := h.waitStatus("lag-9", checkpoint.StatusCompleted, 10*time.Second)
	if run.Steps != 2 {
		t.Fatalf("completed after %d steps, want 2", run.Steps)
	}
}

// A worker died between the two writes of a SleepUntil commit: the
// redelivery rolls the run forward to its timer and indexes it, so the
// run wakes on time rather than when the scheduler's repair finds it.
func TestRollForwardIndexesTheTimer(t *testing.T) {
	h := newHarness(t, "kv")
	ctx := context.Background()
	flow := steps.New[counter]("nap", 1)
	two := flow.Ref("two")
	flow.
		Step("one", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			return steps.SleepUntil(two, st, time.Now().Add(time.Second)), nil
		}).
		Step("two", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			return steps.Complete(st), nil
		})
	reg := steps.NewRegistry().MustRegister(flow)
	setup, err := worker.New(worker.Config{JetStream: h.js, Store: h.store, Registry: reg, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	h.start("nap", "nap-1", "")
	kv, err := h.js.KeyValue(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	wake := time.Now().Add(time.Second).UTC()
	cp := checkpoint.Checkpoint{RunID: "nap-1", Step: 1, Name: "one", State: []byte(`{"n":0}`), Next: "two",
		Status: checkpoint.StatusWaiting, WakeAt: wake, Attempt: 1, At: time.Now().UTC()}
	doc, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "cp.nap-1.1", doc); err != nil {
		t.Fatal(err)
	}
	// The scheduler's repair pass would find an unindexed timer only after
	// two leases (10s here).
	h.StartScheduler(nil)
	h.startWorker(reg, nil)
	testenv.Eventually(t, time.Until(wake)+4*time.Second, "run woke by its timer", func() bool {
		run, err := h.store.GetRun(ctx, "nap-1")
		return err == nil && run.Status == checkpoint.StatusCompleted
	})
}
