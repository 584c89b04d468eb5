package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 jetstream: the reconnect watcher of an async publisher
		// (Object Store puts) can start on a nil status channel and block forever.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// The embedded nats-server and go-redis keep background goroutines
		// that end shortly after their owners are closed.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func decode[T any](t testing.TB, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPipelineCompletes(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			h.startWorker(steps.NewRegistry().MustRegister(pipeline()), nil)
			for _, id := range []string{"p-1", "p-2", "p-3"} {
				h.start("pipeline", id, `{"n": 10}`)
			}
			for _, id := range []string{"p-1", "p-2", "p-3"} {
				run := h.waitStatus(id, checkpoint.StatusCompleted, 20*time.Second)
				if run.Step != 3 {
					t.Errorf("%s: step %d, want 3", id, run.Step)
				}
				cps := h.checkpoints(id)
				assertContiguous(t, cps, 3)
				st := decode[counter](t, cps[2].State)
				if st.N != 13 || joinTrail(st) != "one,two,three" {
					t.Errorf("%s: final state %+v", id, st)
				}
			}
		})
	}
}

// An agent loop: the step picks its successor at run time.
func TestAgentLoopChoosesNextStep(t *testing.T) {
	loop := steps.New[counter]("loop", 1)
	think := loop.Ref("think")
	act := loop.Ref("act")
	answer := loop.Ref("answer")
	loop.
		Step("think", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			st.N++
			if st.N >= 5 {
				return steps.Next(answer, st), nil
			}
			return steps.Next(act, st), nil
		}).
		Step("act", func(ctx context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			out, err := steps.Call(ctx, s, "tool", st.N, func(context.Context) (string, error) { return "ok", nil })
			if err != nil {
				return steps.Outcome[counter]{}, err
			}
			st.Trail = append(st.Trail, out)
			return steps.Next(think, st), nil
		}).
		Step("answer", func(_ context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
			return steps.Complete(st), nil
		})
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(loop), nil)
	h.start("loop", "agent-1", "")
	h.waitStatus("agent-1", checkpoint.StatusCompleted, 20*time.Second)
	cps := h.checkpoints("agent-1")
	// think,act ×4, think, answer = 10 steps.
	assertContiguous(t, cps, 10)
	names := ""
	for _, cp := range cps {
		names += cp.Name[:1]
	}
	if names != "tatatatata" {
		t.Errorf("step sequence %q", names)
	}
	if len(cps[1].Journal) != 1 || cps[1].Journal[0].Name != "tool" {
		t.Errorf("journal of step 2: %+v", cps[1].Journal)
	}
}

func approvalFlow() *steps.Workflow[counter] {
	w := steps.New[counter]("approval", 1)
	done := w.Ref("done")
	return w.
		Step("ask", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			req := steps.ApprovalRequest{Payload: map[string]any{"run": s.RunID(), "amount": 1840}, Group: "adjusters", TTL: time.Hour}
			d, err := s.Approval(req)
			if err != nil {
				return steps.Outcome[counter]{}, err
			}
			if d == nil {
				return steps.Park[counter](req), nil
			}
			if d.Decision != checkpoint.DecisionApproved {
				return steps.Fail(st, "rejected by "+d.By), nil
			}
			st.Trail = append(st.Trail, "approved-by-"+d.By)
			return steps.Next(done, st), nil
		}).
		Step("done", func(_ context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
			return steps.Complete(st), nil
		})
}

func TestApprovalParksAndResumes(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			h.startWorker(steps.NewRegistry().MustRegister(approvalFlow()), nil)
			ctx := context.Background()
			h.start("approval", "a-1", "")
			h.start("approval", "a-2", "")
			run := h.waitStatus("a-1", checkpoint.StatusWaiting, 20*time.Second)
			if run.Wait == nil || run.Wait.Group != "adjusters" || run.Wait.Step != 1 || len(run.Wait.PayloadSHA256) != 64 {
				t.Fatalf("wait record: %+v", run.Wait)
			}
			h.waitStatus("a-2", checkpoint.StatusWaiting, 20*time.Second)
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "a-1", By: "ana", Channel: client.ChannelCLI, PayloadSHA256: "0000"}); !errors.Is(err, client.ErrStaleHash) {
				t.Fatalf("stale hash: %v", err)
			}
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "a-1", By: "ana", Channel: client.ChannelCLI}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "a-2", By: "bob", Reject: true, Reason: "no", Channel: client.ChannelCLI}); err != nil {
				t.Fatal(err)
			}
			// Deciding twice is refused and records nothing.
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "a-1", By: "eve", Channel: client.ChannelCLI}); !errors.Is(err, client.ErrNotWaiting) {
				t.Fatalf("second decision: %v", err)
			}
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "nope", By: "eve", Channel: client.ChannelCLI}); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("unknown run: %v", err)
			}
			done := h.waitStatus("a-1", checkpoint.StatusCompleted, 20*time.Second)
			if len(done.Approvals) != 1 || done.Approvals[0].By != "ana" || done.Approvals[0].Decision != "approved" || done.Approvals[0].PayloadSHA256 != run.Wait.PayloadSHA256 {
				t.Errorf("approvals: %+v", done.Approvals)
			}
			cps := h.checkpoints("a-1")
			assertContiguous(t, cps, 2)
			if st := decode[counter](t, cps[1].State); joinTrail(st) != "approved-by-ana" {
				t.Errorf("state %+v", st)
			}
			failed := h.waitStatus("a-2", checkpoint.StatusFailed, 20*time.Second)
			if failed.Error != "rejected by bob" {
				t.Errorf("a-2 error %q", failed.Error)
			}
		})
	}
}

func TestRetryThenDeadLetter(t *testing.T) {
	var calls atomic.Int64
	flaky := steps.New[counter]("flaky", 1).
		Step("try", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			calls.Add(1)
			if s.RunID() == "f-ok" && s.Attempt() >= 3 {
				return steps.Complete(st), nil
			}
			return steps.Outcome[counter]{}, errors.New("backend unavailable")
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 3, Backoff: 50 * time.Millisecond}))
	h := newHarness(t, "redis")
	h.startWorker(steps.NewRegistry().MustRegister(flaky), nil)
	h.start("flaky", "f-ok", "")
	h.start("flaky", "f-dead", "")
	ok := h.waitStatus("f-ok", checkpoint.StatusCompleted, 20*time.Second)
	if cps := h.checkpoints("f-ok"); len(cps) != 1 || cps[0].Attempt != 3 {
		t.Errorf("f-ok checkpoints %+v", cps)
	}
	_ = ok
	dead := h.waitStatus("f-dead", checkpoint.StatusDead, 20*time.Second)
	if dead.Error == "" {
		t.Error("dead run without reason")
	}
	ctx := context.Background()
	dlq, err := h.js.Stream(ctx, queue.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	// The run is marked dead before its dead letter is published (a
	// duplicate delivery that loses the race must publish nothing): the
	// letter follows the status.
	var msg *jetstream.RawStreamMsg
	testenv.Eventually(t, 10*time.Second, "dead letter of f-dead", func() bool {
		msg, err = dlq.GetLastMsgForSubject(ctx, queue.DLQSubject("flaky", "f-dead"))
		return err == nil
	})
	dl := decode[queue.DeadLetter](t, msg.Data)
	if dl.RunID != "f-dead" || dl.Step != 1 || dl.Attempt != 3 {
		t.Errorf("dead letter %+v", dl)
	}
	if n := calls.Load(); n != 6 {
		t.Errorf("step body ran %d times, want 6 (3 each)", n)
	}
}

// A malformed message is terminated and counted; the consumer keeps going.
func TestMalformedMessageIsTerminated(t *testing.T) {
	h := newHarness(t, "redis")
	w, _ := h.startWorker(steps.NewRegistry().MustRegister(pipeline()), nil)
	for _, body := range []string{"not json", `{"run_id":"bad.id","workflow":"pipeline","step":1}`, `{"run_id":"x","workflow":"pipeline","step":0}`, `{"run_id":"other","workflow":"pipeline","step":1}`} {
		if err := h.nc.Publish(queue.StepSubject("pipeline", "x"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	h.start("pipeline", "after-garbage", "")
	h.waitStatus("after-garbage", checkpoint.StatusCompleted, 20*time.Second)
	testenv.Eventually(t, 10*time.Second, "4 malformed counted", func() bool { return w.Stats().Malformed == 4 })
	if _, err := h.store.GetRun(context.Background(), "x"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("garbage created a run: %v", err)
	}
}

// Acceptance 3: re-publishing every message of the step stream after all
// runs completed changes nothing.
func TestReplayingTheStreamChangesNothing(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			w, _ := h.startWorker(steps.NewRegistry().MustRegister(pipeline(), approvalFlow()), nil)
			ids := []string{"r-1", "r-2", "r-3", "r-4"}
			for _, id := range ids {
				h.start("pipeline", id, "")
			}
			h.start("approval", "r-a", "")
			h.waitStatus("r-a", checkpoint.StatusWaiting, 20*time.Second)
			if _, err := h.client.Decide(context.Background(), client.Decision{RunID: "r-a", By: "ana", Channel: "cli"}); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, "r-a")
			before := map[string]checkpoint.Run{}
			beforeCps := map[string]string{}
			for _, id := range ids {
				before[id] = h.waitStatus(id, checkpoint.StatusCompleted, 20*time.Second)
				b, _ := json.Marshal(h.checkpoints(id))
				beforeCps[id] = string(b)
			}
			committed := w.Stats().Committed
			n := testenv.RepublishSteps(t, h.js)
			testenv.Eventually(t, 20*time.Second, "replays handled", func() bool {
				s := w.Stats()
				return s.Replayed+s.Stale >= int64(n)
			})
			if got := w.Stats().Committed; got != committed {
				t.Errorf("replay committed %d new steps", got-committed)
			}
			for _, id := range ids {
				run, err := h.store.GetRun(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if run.Status != before[id].Status || run.Step != before[id].Step || run.Rev != before[id].Rev {
					t.Errorf("%s changed: %+v -> %+v", id, before[id], run)
				}
				b, _ := json.Marshal(h.checkpoints(id))
				if string(b) != beforeCps[id] {
					t.Errorf("%s checkpoints changed", id)
				}
			}
		})
	}
}

// Acceptance 6: a parked run holds no goroutine and no memory in a worker.
func TestParkedRunsHoldNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("parks 10,000 runs")
	}
	const runs = 10000
	parker := steps.New[counter]("parker", 1).
		Step("ask", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			return steps.Park[counter](steps.ApprovalRequest{Payload: s.RunID(), Group: "adjusters"}), nil
		})
	// NATS and Redis run as their own processes so that this process holds
	// only the worker (and the test's client).
	h := newHarnessOn(t, "redis", testenv.StartNATSProcess(t).URL)
	w, _ := h.startWorker(steps.NewRegistry().MustRegister(parker), func(c *worker.Config) { c.Concurrency = 64 })
	ctx := context.Background()
	park := func(from, to int) {
		t.Helper()
		var wg sync.WaitGroup
		ids := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range ids {
					if _, _, err := h.client.Start(ctx, client.StartRequest{Workflow: "parker", RunID: fmt.Sprintf("park-%05d", i)}); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		for i := from; i < to; i++ {
			ids <- i
		}
		close(ids)
		wg.Wait()
		testenv.Eventually(t, 3*time.Minute, "all runs parked", func() bool { return w.Stats().Parked >= int64(to) })
	}
	// A warm-up opens the connections and sizes the buffers the load needs;
	// what the worker holds idle is measured after it.
	const warmup = 1000
	park(0, warmup)
	idleG, idleHeap := settle()
	park(warmup, warmup+runs)
	waiting, err := h.store.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusWaiting})
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) != warmup+runs {
		t.Fatalf("%d waiting runs, want %d", len(waiting), warmup+runs)
	}
	waiting = nil
	parkedG, parkedHeap := settle()
	t.Logf("idle: %d goroutines, %d KiB heap; %d parked: %d goroutines, %d KiB heap", idleG, idleHeap>>10, runs, parkedG, parkedHeap>>10)
	if parkedG > idleG+2 {
		t.Errorf("goroutines grew from %d to %d with %d parked runs", idleG, parkedG, runs)
	}
	// Allow 1 MiB of noise (client buffers, pools): 10,000 parked runs holding
	// even 200 bytes each would exceed it.
	if parkedHeap > idleHeap+1<<20 {
		t.Errorf("heap grew from %d to %d bytes with %d parked runs", idleHeap, parkedHeap, runs)
	}
}

// settle returns goroutines and live heap after the runtime quiets down.
func settle() (int, uint64) {
	var ms runtime.MemStats
	for range 3 {
		runtime.GC()
		time.Sleep(200 * time.Millisecond)
	}
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapAlloc
}
