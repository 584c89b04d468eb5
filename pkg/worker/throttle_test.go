package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

type asked struct {
	N int `json:"n"`
}

// A step throttled by its rate limit 30 times (more than the delivery
// fuse's 20 deliveries, with one attempt allowed) is handed back each
// time without a failure recorded or an attempt used, and completes.
func TestThrottledStepIsNotAnAttempt(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			var runs atomic.Int32
			wf := steps.New[asked]("throttled", 1).
				Step("ask", func(_ context.Context, _ *steps.Context, a asked) (steps.Outcome[asked], error) {
					if n := runs.Add(1); n <= 30 {
						return steps.Outcome[asked]{}, &steps.ThrottledError{Call: "ask", Resource: "model", Wait: 10 * time.Millisecond}
					}
					return steps.Complete(a), nil
				}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
			m := &flowEvents{}
			w, _ := h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Metrics = m })
			h.start("throttled", "thr-1", `{}`)
			h.waitStatus("thr-1", checkpoint.StatusCompleted, 30*time.Second)
			snap, err := h.store.Load(context.Background(), "thr-1", checkpoint.AtStep(1))
			if err != nil {
				t.Fatal(err)
			}
			if st := w.Stats(); st.Retried != 0 || st.Dead != 0 || len(snap.Failures) != 0 || runs.Load() != 31 {
				t.Fatalf("after 30 hand-backs: %d retried, %d dead, failures %v, %d runs of the body; want none, none, none, 31", st.Retried, st.Dead, snap.Failures, runs.Load())
			}
			// What the alert on resumes subtracts (deploy/prometheus):
			// each hand-back's redelivery, but those after a renewal,
			// counts as a resume.
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.resumed == 0 || m.resumed > 30 {
				t.Errorf("%d redeliveries counted as resumed after 30 hand-backs, want 1-30", m.resumed)
			}
		})
	}
}

// flowEvents is a worker.Metrics with worker.FlowMetrics.
type flowEvents struct {
	worker.NopMetrics
	mu                        sync.Mutex
	throttled, handed, slowed int
	resumed                   int
	waited                    time.Duration
}

func (f *flowEvents) Resumed(string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed++
}

func (f *flowEvents) Throttled(_ string, handedBack bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttled++
	if handedBack {
		f.handed++
	}
}

func (f *flowEvents) TokenWaited(_ string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waited += d
}

func (f *flowEvents) SlowedDown(string, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slowed++
}

// tooMany is a provider's rate-limit answer (flow.RateLimited).
type tooMany struct{ after time.Duration }

func (e *tooMany) Error() string                      { return "429 too many requests" }
func (e *tooMany) RateLimited() (time.Duration, bool) { return e.after, true }

// A worker with a flow store spaces the calls of a limited resource at
// its rate, waiting in the step; a 429 stops every call for the
// Retry-After and hands the step back without using an attempt.
func TestWorkerTakesTokens(t *testing.T) {
	h := newHarness(t, "kv")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fl, err := flow.NewStore(ctx, h.js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.Set(ctx, "model", flow.Rate{N: 10, Per: time.Second, Burst: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	var refused atomic.Bool
	wf := steps.New[asked]("limited", 1).
		Step("ask", func(ctx context.Context, s *steps.Context, a asked) (steps.Outcome[asked], error) {
			_, err := steps.Call(ctx, s, "provider", a, func(context.Context) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				at = append(at, time.Now())
				if len(at) == 5 && refused.CompareAndSwap(false, true) {
					return 0, &tooMany{after: 1500 * time.Millisecond}
				}
				return 1, nil
			}, steps.Resource("model"))
			return steps.Complete(a), err
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
	m := &flowEvents{}
	w, _ := h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow, c.Metrics = fl, m })
	for i := range 12 {
		h.start("limited", "lim-"+string(rune('a'+i)), `{}`)
	}
	for i := range 12 {
		h.waitStatus("lim-"+string(rune('a'+i)), checkpoint.StatusCompleted, 20*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 13 { // 12 calls and the refused one
		t.Fatalf("%d calls made, want 13", len(at))
	}
	for i := 1; i < len(at); i++ {
		gap := at[i].Sub(at[i-1])
		if gap < 80*time.Millisecond { // 10/s, burst 1, clocks' slack
			t.Errorf("calls %d and %d %s apart, under the limit's 100ms", i-1, i, gap)
		}
		if i == 5 && gap < 1400*time.Millisecond {
			t.Errorf("the call after the 429 came %s after it, want the Retry-After of 1.5s", gap)
		}
	}
	st := w.Stats()
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.Retried != 0 || st.Dead != 0 || m.slowed != 1 || m.throttled == 0 || m.handed == 0 || m.waited == 0 {
		t.Fatalf("retried %d, dead %d; metrics: %d slow-downs, %d throttled (%d handed back), %s waited; want 0, 0, 1, some, some, some",
			st.Retried, st.Dead, m.slowed, m.throttled, m.handed, m.waited)
	}
}

// A step that waits for its rate limit longer than the schedulers'
// stuck-after is not taken for stuck: its hand-backs leave liveness
// marks, and the repair publishes nothing beside it.
func TestThrottledStepIsNotStuck(t *testing.T) {
	h := newHarness(t, "redis")
	var first atomic.Int64
	wf := steps.New[asked]("waits", 1).
		Step("ask", func(_ context.Context, _ *steps.Context, a asked) (steps.Outcome[asked], error) {
			first.CompareAndSwap(0, time.Now().UnixNano())
			if time.Since(time.Unix(0, first.Load())) < 5*time.Second {
				return steps.Outcome[asked]{}, &steps.ThrottledError{Call: "ask", Resource: "model", Wait: 300 * time.Millisecond}
			}
			return steps.Complete(a), nil
		})
	h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.StepTimeout = time.Second })
	s := h.StartScheduler(func(c *scheduler.Config) {
		c.StepTimeout, c.StuckAfter, c.RepairInterval = time.Second, 2*time.Second, 100*time.Millisecond
	})
	h.start("waits", "wait-1", `{}`)
	h.waitStatus("wait-1", checkpoint.StatusCompleted, 30*time.Second)
	if n := s.Stats().Repaired; n != 0 {
		t.Fatalf("a step waiting 5s for its rate limit was repaired %d times as stuck (stuck after 2s)", n)
	}
}

// A call naming a resource no limit can have (a bug in the workflow) is
// not handed back for ever: the run goes to the dead letters, saying why.
func TestBadResourceNameIsPermanent(t *testing.T) {
	h := newHarness(t, "kv")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fl, err := flow.NewStore(ctx, h.js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wf := steps.New[asked]("badname", 1).
		Step("ask", func(ctx context.Context, s *steps.Context, a asked) (steps.Outcome[asked], error) {
			_, err := steps.Call(ctx, s, "provider", a, func(context.Context) (int, error) { return 1, nil }, steps.Resource("no spaces please"))
			return steps.Complete(a), err
		})
	h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow = fl })
	h.start("badname", "bad-1", `{}`)
	run := h.waitStatus("bad-1", checkpoint.StatusDead, 20*time.Second)
	if !strings.Contains(run.Error, `limit name "no spaces please"`) {
		t.Fatalf("dead with %q, want the bad limit name", run.Error)
	}
}

// TestRatePerTenant: "api" allows each tenant 4 calls a second (burst 1)
// and has no rate over all tenants. Tenants a and b start 6 runs each at
// once: each tenant's calls are spaced by its own rate, and b's are not
// held behind a's (both tenants' calls are done in about the time one
// tenant's take, not twice that).
func TestRatePerTenant(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			fl, err := flow.NewStore(ctx, h.js, flow.StoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fl.SetRatePerKey(ctx, "api", flow.Rate{N: 4, Per: time.Second, Burst: 1}, "test"); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			at := map[string][]time.Time{}
			wf := steps.New[tenantRun]("pertenant", 1).FairnessKey(func(in tenantRun) string { return in.Tenant })
			wf.Step("call", func(ctx context.Context, s *steps.Context, in tenantRun) (steps.Outcome[tenantRun], error) {
				_, err := steps.Call(ctx, s, "api", in, func(context.Context) (int, error) {
					mu.Lock()
					defer mu.Unlock()
					at[in.Tenant] = append(at[in.Tenant], time.Now())
					return 1, nil
				}, steps.Resource("api"))
				return steps.Complete(in), err
			})
			_, stop := h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow, c.Concurrency = fl, 16 })
			defer stop()
			for i := range 12 {
				tenant := []string{"a", "b"}[i%2]
				h.start("pertenant", fmt.Sprintf("%s-%d", tenant, i), fmt.Sprintf(`{"tenant":%q}`, tenant))
			}
			for i := range 12 {
				h.waitStatus(fmt.Sprintf("%s-%d", []string{"a", "b"}[i%2], i), checkpoint.StatusCompleted, 30*time.Second)
			}
			mu.Lock()
			defer mu.Unlock()
			var first, last time.Time
			for tenant, ts := range at {
				slices.SortFunc(ts, func(x, y time.Time) int { return x.Compare(y) })
				if len(ts) != 6 {
					t.Fatalf("tenant %s made %d calls, want 6", tenant, len(ts))
				}
				// 4/s burst 1: 6 calls span at least 5 intervals (1.25 s); the
				// calls are timed after their tokens, so allow a scheduler's
				// slack, not a gap per call.
				if span := ts[5].Sub(ts[0]); span < 1100*time.Millisecond {
					t.Errorf("tenant %s's 6 calls took %s, under its rate's 1.25 s", tenant, span)
				}
				if first.IsZero() || ts[0].Before(first) {
					first = ts[0]
				}
				if ts[5].After(last) {
					last = ts[5]
				}
			}
			// One tenant's 6 calls take 1.25 s at 4/s; shared, 12 would take 2.75 s.
			if span := last.Sub(first); span > 2*time.Second {
				t.Errorf("both tenants' calls took %s: the tenants shared one rate", span)
			}
			t.Logf("12 calls of 2 tenants at 4/s each in %s", last.Sub(first).Round(time.Millisecond))
		})
	}
}
