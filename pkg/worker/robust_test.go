package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// A resumed step re-reads its facts: calls journaled before it parked are
// not replayed to it, and a changed payload parks it again.
func TestResumeRereadsFacts(t *testing.T) {
	var lookups atomic.Int64
	var amount atomic.Int64
	amount.Store(1840)
	flow := steps.New[counter]("reread", 1).
		Step("ask", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			a, err := steps.Call(ctx, s, "lookup", s.RunID(), func(context.Context) (int64, error) {
				lookups.Add(1)
				return amount.Load(), nil
			})
			if err != nil {
				return steps.Outcome[counter]{}, err
			}
			req := steps.ApprovalRequest{Payload: map[string]int64{"amount": a}, Group: "adjusters"}
			d, err := s.Approval(req)
			if err != nil {
				return steps.Outcome[counter]{}, err
			}
			if d == nil {
				return steps.Park[counter](req), nil
			}
			st.N = int(a)
			return steps.Complete(st), nil
		})
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(flow), nil)
	ctx := context.Background()
	h.start("reread", "rr-1", "")
	first := h.waitStatus("rr-1", checkpoint.StatusWaiting, 20*time.Second)
	// The facts change after the adjuster looked and before the resume.
	amount.Store(2500)
	if _, err := h.client.Decide(ctx, client.Decision{RunID: "rr-1", By: "ana", Channel: "cli", PayloadSHA256: first.Wait.PayloadSHA256}); err != nil {
		t.Fatal(err)
	}
	var again checkpoint.Run
	testenv.Eventually(t, 20*time.Second, "parked again with the new payload", func() bool {
		r, err := h.store.GetRun(ctx, "rr-1")
		again = r
		return err == nil && r.Status == checkpoint.StatusWaiting && r.Wait != nil && r.Wait.PayloadSHA256 != first.Wait.PayloadSHA256
	})
	if n := lookups.Load(); n != 2 {
		t.Fatalf("lookup ran %d times, want 2 (re-read on resume)", n)
	}
	if _, err := h.client.Decide(ctx, client.Decision{RunID: "rr-1", By: "ana", Channel: "cli", PayloadSHA256: again.Wait.PayloadSHA256}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("rr-1", checkpoint.StatusCompleted, 20*time.Second)
	if st := decode[counter](t, h.checkpoints("rr-1")[0].State); st.N != 2500 {
		t.Errorf("completed with amount %d, want 2500", st.N)
	}
}

// flakyStore wraps a real store and fails Load for chosen runs a number of
// times, as an unreachable Redis would.
type flakyStore struct {
	checkpoint.Store
	mu          sync.Mutex
	fails       map[string]int
	recordFails int // RecordCall failures to inject, any run
}

func (f *flakyStore) RecordCall(ctx context.Context, id string, at checkpoint.StepRef, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	f.mu.Lock()
	if f.recordFails > 0 {
		f.recordFails--
		f.mu.Unlock()
		return checkpoint.CallRecord{}, errUnavailable
	}
	f.mu.Unlock()
	return f.Store.RecordCall(ctx, id, at, rec)
}

var errUnavailable = errors.New("store unavailable (injected)")

func (f *flakyStore) Load(ctx context.Context, id string, at checkpoint.StepRef) (checkpoint.Snapshot, error) {
	f.mu.Lock()
	if f.fails[id] > 0 {
		f.fails[id]--
		f.mu.Unlock()
		return checkpoint.Snapshot{}, errUnavailable
	}
	f.mu.Unlock()
	return f.Store.Load(ctx, id, at)
}

// Store outages don't use up a step's attempts: only failures of the body do.
func TestStoreOutageDoesNotUseAttempts(t *testing.T) {
	var bodies atomic.Int64
	flow := steps.New[counter]("outage", 1).
		Step("only", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			if bodies.Add(1) == 1 {
				return steps.Outcome[counter]{}, errors.New("one real failure")
			}
			return steps.Complete(st), nil
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 2, Backoff: 10 * time.Millisecond}))
	h := newHarness(t, "redis")
	flaky := &flakyStore{Store: h.store, fails: map[string]int{"o-1": 4}}
	h.startWorker(steps.NewRegistry().MustRegister(flow), func(c *worker.Config) { c.Store = flaky })
	h.start("outage", "o-1", "")
	h.waitStatus("o-1", checkpoint.StatusCompleted, 60*time.Second)
	cps := h.checkpoints("o-1")
	if len(cps) != 1 || cps[0].Attempt < 6 {
		t.Fatalf("checkpoints %+v: want one, committed after 4 outages and 1 failure", cps)
	}
	snap, err := h.store.Load(context.Background(), "o-1", checkpoint.AtStep(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Failures) != 1 || snap.Failures[0].Error != "one real failure" {
		t.Errorf("failures %+v, want the one real failure", snap.Failures)
	}
}

// A step that hangs is cancelled by the step timeout and retried by its
// policy, then dead-lettered, instead of holding a slot forever.
func TestStepTimeout(t *testing.T) {
	flow := steps.New[counter]("hangs", 1).
		Step("block", func(ctx context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
			<-ctx.Done()
			return steps.Outcome[counter]{}, ctx.Err()
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 2, Backoff: 10 * time.Millisecond}))
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(flow), func(c *worker.Config) { c.StepTimeout = 200 * time.Millisecond })
	h.start("hangs", "h-1", "")
	dead := h.waitStatus("h-1", checkpoint.StatusDead, 30*time.Second)
	if dead.Error == "" {
		t.Error("dead without a reason")
	}
}

// A worker joining with another ack wait does not overwrite the shared
// consumer's (which would make the other workers' heartbeats too slow).
func TestConsumerSettingsAreKept(t *testing.T) {
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(pipeline()), func(c *worker.Config) { c.MaxAckPending = 5000 }) // AckWait 2s
	h.startWorker(steps.NewRegistry().MustRegister(pipeline()), func(c *worker.Config) { c.AckWait, c.MaxAckPending = 45*time.Second, 10 })
	c, err := h.js.Consumer(context.Background(), queue.StepStream, queue.ConsumerName("pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	if aw, maxPending := c.CachedInfo().Config.AckWait, c.CachedInfo().Config.MaxAckPending; aw != 2*time.Second || maxPending != 5000 {
		t.Fatalf("consumer ack wait %s, max ack pending %d; want the first worker's 2s and 5000", aw, maxPending)
	}
	h.start("pipeline", "k-1", "")
	h.waitStatus("k-1", checkpoint.StatusCompleted, 20*time.Second)
}

// A consumer deleted under a running worker (an operator's mistake) is
// created again and the runs go on.
func TestDeletedConsumerIsRecreated(t *testing.T) {
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(pipeline()), nil)
	ctx := context.Background()
	if err := h.js.DeleteConsumer(ctx, queue.StepStream, queue.ConsumerName("pipeline")); err != nil {
		t.Fatal(err)
	}
	h.start("pipeline", "del-1", "")
	h.waitStatus("del-1", checkpoint.StatusCompleted, 30*time.Second)
}

// A store that fails to record a call's result (the call was made) is the
// store's failure: the step is retried without using up its attempts, and
// its effect is keyed, so nothing is paid twice.
func TestJournalOutageDoesNotUseAttempts(t *testing.T) {
	var calls atomic.Int64
	flow := steps.New[counter]("journal-outage", 1).
		Step("pay", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			_, err := steps.Call(ctx, s, "pay", s.IdempotencyKey(), func(context.Context) (string, error) {
				calls.Add(1)
				return "paid", nil
			})
			if err != nil {
				return steps.Outcome[counter]{}, err
			}
			return steps.Complete(st), nil
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 2, Backoff: 10 * time.Millisecond}))
	h := newHarness(t, "redis")
	flaky := &flakyStore{Store: h.store, recordFails: 3}
	h.startWorker(steps.NewRegistry().MustRegister(flow), func(c *worker.Config) { c.Store = flaky })
	h.start("journal-outage", "jo-1", "")
	h.waitStatus("jo-1", checkpoint.StatusCompleted, 60*time.Second)
	snap, err := h.store.Load(context.Background(), "jo-1", checkpoint.AtStep(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Failures) != 0 {
		t.Errorf("failures counted: %+v", snap.Failures)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("call made %d times, want 4 (3 unrecorded + 1; a real effect would be keyed)", n)
	}
}

// A KV commit is two writes; a worker that dies between them leaves the
// run behind its checkpoint. The next delivery rolls the run forward and
// counts the step as the commit would have: the run ends with every step
// counted once.
func TestRollForwardCountsTheStep(t *testing.T) {
	h := newHarness(t, "kv")
	ctx := context.Background()
	reg := steps.NewRegistry().MustRegister(pipeline())
	// The run starts with no worker running: its step 1 waits on the stream.
	setup, err := worker.New(worker.Config{JetStream: h.js, Store: h.store, Registry: reg, AckWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	h.start("pipeline", "lag-1", "")
	// What the dead worker's first write left: checkpoint 1, run untouched.
	kv, err := h.js.KeyValue(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	cp := checkpoint.Checkpoint{RunID: "lag-1", Step: 1, Name: "one", State: []byte(`{"n":1,"trail":["one"]}`), Next: "two",
		Status: checkpoint.StatusRunning, Attempt: 1, At: time.Now().UTC(), Spend: 0.5}
	doc, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "cp.lag-1.1", doc); err != nil {
		t.Fatal(err)
	}
	h.startWorker(reg, nil)
	run := h.waitStatus("lag-1", checkpoint.StatusCompleted, 20*time.Second)
	if run.Steps != 3 || run.Spend != 0.5 {
		t.Errorf("completed with %d steps and spend %v, want 3 steps and 0.5 (step 1 counted by the roll-forward)", run.Steps, run.Spend)
	}
	if st := decode[counter](t, h.checkpoints("lag-1")[2].State); joinTrail(st) != "one,two,three" {
		t.Errorf("trail %q, want one,two,three (step 1 not run again)", joinTrail(st))
	}
}

// slowCommits is the real store with its first commit slower than the ack
// wait (a store failing over).
type slowCommits struct {
	checkpoint.Store
	delay time.Duration
	once  sync.Once
}

func (s *slowCommits) Commit(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint) (checkpoint.Run, error) {
	s.once.Do(func() { time.Sleep(s.delay) })
	return s.Store.Commit(ctx, run, cp)
}

// A commit that takes longer than the ack wait keeps its delivery alive:
// the step is not delivered again meanwhile, and its body runs once.
func TestSlowCommitKeepsTheDelivery(t *testing.T) {
	var runs atomic.Int64
	flow := steps.New[counter]("slow-commit", 1).
		Step("only", func(_ context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
			runs.Add(1)
			return steps.Complete(st), nil
		})
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(flow), func(c *worker.Config) {
		c.AckWait = time.Second
		c.Store = &slowCommits{Store: h.store, delay: 2500 * time.Millisecond}
	})
	h.start("slow-commit", "sc-1", "")
	h.waitStatus("sc-1", checkpoint.StatusCompleted, 20*time.Second)
	cps := h.checkpoints("sc-1")
	if n := runs.Load(); n != 1 || len(cps) != 1 || cps[0].Attempt != 1 {
		t.Fatalf("step body ran %d times, checkpoints %+v; want once, committed by delivery 1", n, cps)
	}
}
