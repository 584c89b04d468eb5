package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// tokenTimes is what a test step saw of its rate limit, by run: when
// its body first ran, when a call of it came back throttled (the first
// time), and when the call was made.
type tokenTimes struct {
	mu                      sync.Mutex
	began, throttled, calls map[string]time.Time
}

func newTokenTimes() *tokenTimes {
	return &tokenTimes{began: map[string]time.Time{}, throttled: map[string]time.Time{}, calls: map[string]time.Time{}}
}

// first sets m[id] to now unless it is set.
func (tt *tokenTimes) first(m map[string]time.Time, id string) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if _, ok := m[id]; !ok {
		m[id] = time.Now()
	}
}

func (tt *tokenTimes) get(m map[string]time.Time, id string) time.Time {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return m[id]
}

// pacedWorkflow is one step that makes one call of resource model,
// noting when in tt.
func pacedWorkflow(name string, tt *tokenTimes) *steps.Workflow[asked] {
	return steps.New[asked](name, 1).
		Step("ask", func(ctx context.Context, s *steps.Context, a asked) (steps.Outcome[asked], error) {
			tt.first(tt.began, s.RunID())
			_, err := steps.Call(ctx, s, "provider", a, func(context.Context) (int, error) {
				tt.first(tt.calls, s.RunID())
				return 1, nil
			}, steps.Resource("model"))
			if errors.Is(err, steps.ErrThrottled) {
				tt.first(tt.throttled, s.RunID())
			}
			return steps.Complete(a), err
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
}

// limitModel sets resource model's rate limit in a flow store on h's
// NATS.
func limitModel(t *testing.T, h *harness, rate flow.Rate) *flow.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fl, err := flow.NewStore(ctx, h.js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.Set(ctx, "model", rate, "test"); err != nil {
		t.Fatal(err)
	}
	return fl
}

// A step handed back for its rate limit (1 call per 2 s: the second
// call's wait is over the second a step sleeps in place) commits how
// long it waited for the token, from the hand-back to the token at
// least; a step that took its token at once commits no wait.
func TestCheckpointSaysHowLongAStepWasHandedBackForTokens(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			fl := limitModel(t, h, flow.Rate{N: 1, Per: 2 * time.Second, Burst: 1})
			tt := newTokenTimes()
			h.startWorker(steps.NewRegistry().MustRegister(pacedWorkflow("paced", tt)), func(c *worker.Config) { c.Flow = fl })
			h.start("paced", "tok-1", `{}`)
			h.waitStatus("tok-1", checkpoint.StatusCompleted, 20*time.Second)
			h.start("paced", "tok-2", `{}`)
			h.waitStatus("tok-2", checkpoint.StatusCompleted, 20*time.Second)

			if cp := h.checkpoints("tok-1")[0]; cp.TokenWaitMS != 0 || cp.TokenResource != "" {
				t.Errorf("tok-1 took its token at once, but its checkpoint says it waited %.1fms for %q", cp.TokenWaitMS, cp.TokenResource)
			}
			cp := h.checkpoints("tok-2")[0]
			thr := tt.get(tt.throttled, "tok-2")
			if thr.IsZero() || cp.Attempt < 2 {
				t.Fatalf("tok-2 was not handed back (throttled %v, committed by delivery %d)", thr, cp.Attempt)
			}
			// From the hand-back (after it, as the body saw it) to the
			// call (after its token).
			waited := tt.get(tt.calls, "tok-2").Sub(thr)
			got := time.Duration(cp.TokenWaitMS * float64(time.Millisecond))
			t.Logf("%s: tok-2 handed back %s before its call; checkpoint: %s for %q (attempt %d)", kind, waited, got, cp.TokenResource, cp.Attempt)
			if cp.TokenResource != "model" || got < waited || got > waited+time.Second {
				t.Errorf("tok-2's checkpoint says it waited %s for tokens of %q; it was handed back %s before its call: want model, at least that, at most a second more",
					got, cp.TokenResource, waited)
			}
		})
	}
}

// A step whose call sleeps in place for its token (a wait under a
// second) commits the sleep.
func TestCheckpointSaysHowLongAStepSleptForTokens(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			fl := limitModel(t, h, flow.Rate{N: 2, Per: time.Second, Burst: 1})
			tt := newTokenTimes()
			m := &flowEvents{}
			h.startWorker(steps.NewRegistry().MustRegister(pacedWorkflow("paced", tt)), func(c *worker.Config) { c.Flow, c.Metrics = fl, m })
			h.start("paced", "slept-1", `{}`)
			h.start("paced", "slept-2", `{}`)
			h.waitStatus("slept-1", checkpoint.StatusCompleted, 20*time.Second)
			h.waitStatus("slept-2", checkpoint.StatusCompleted, 20*time.Second)
			var waits int
			for _, id := range []string{"slept-1", "slept-2"} {
				cp := h.checkpoints(id)[0]
				if cp.TokenWaitMS == 0 {
					continue
				}
				waits++
				// The body's time around the call holds the sleep and
				// little else.
				around := tt.get(tt.calls, id).Sub(tt.get(tt.began, id))
				got := time.Duration(cp.TokenWaitMS * float64(time.Millisecond))
				t.Logf("%s: %s slept for its token: %s around the call; checkpoint: %s for %q (attempt %d)", kind, id, around, got, cp.TokenResource, cp.Attempt)
				if cp.TokenResource != "model" || cp.Attempt != 1 || got > around || got < around-50*time.Millisecond || got < 100*time.Millisecond {
					t.Errorf("%s's checkpoint says it waited %s for tokens of %q at attempt %d; its body took %s around the call: want model, attempt 1, 100ms to 500ms, within 50ms of that",
						id, got, cp.TokenResource, cp.Attempt, around)
				}
			}
			if waits != 1 {
				t.Errorf("%d of 2 runs started together under 2/s, burst 1, say they waited for tokens; want 1", waits)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.handed != 0 || m.waited == 0 {
				t.Errorf("metrics: %d hand-backs, %s waited in the step; want none, some", m.handed, m.waited)
			}
		})
	}
}

// A step handed back so often that its message is renewed (published
// afresh, its deliveries counted from 1 again) commits the whole wait,
// from its first delivery: the renewed copy says when the original was
// stored.
func TestTokenWaitSurvivesRenewal(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			fl := limitModel(t, h, flow.Rate{N: 100, Per: time.Second, Burst: 10})
			tt := newTokenTimes()
			var mu sync.Mutex
			runs := 0
			wf := steps.New[asked]("renewed", 1).
				Step("ask", func(ctx context.Context, s *steps.Context, a asked) (steps.Outcome[asked], error) {
					tt.first(tt.began, s.RunID())
					mu.Lock()
					runs++
					n := runs
					mu.Unlock()
					if n <= 12 { // as a provider's 429 would, with a wait of 50ms each time
						return steps.Outcome[asked]{}, &steps.ThrottledError{Call: "provider", Resource: "model", Wait: 50 * time.Millisecond}
					}
					_, err := steps.Call(ctx, s, "provider", a, func(context.Context) (int, error) {
						tt.first(tt.calls, s.RunID())
						return 1, nil
					}, steps.Resource("model"))
					return steps.Complete(a), err
				}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
			h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow = fl })
			h.start("renewed", "ren-1", `{}`)
			h.waitStatus("ren-1", checkpoint.StatusCompleted, 30*time.Second)
			cp := h.checkpoints("ren-1")[0]
			waited := tt.get(tt.calls, "ren-1").Sub(tt.get(tt.began, "ren-1"))
			got := time.Duration(cp.TokenWaitMS * float64(time.Millisecond))
			t.Logf("%s: 12 hand-backs, committed by delivery %d of the renewed copy; %s from the first delivery to the call; checkpoint: %s for %q", kind, cp.Attempt, waited, got, cp.TokenResource)
			if cp.Attempt >= 12 {
				t.Fatalf("committed by delivery %d after 12 hand-backs: the message was not renewed", cp.Attempt)
			}
			if cp.TokenResource != "model" || got < waited || got > waited+time.Second {
				t.Errorf("the checkpoint says %s for tokens of %q; the step waited %s from its first delivery to its call: want model, at least that, at most a second more",
					got, cp.TokenResource, waited)
			}
		})
	}
}

// What is not a wait for tokens is not counted as one: a step retried
// after a failure, and a step redelivered whose call's resource has no
// limit, commit no token wait.
func TestTokenWaitIsNotARetryNorAnUnlimitedRedelivery(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			fl := limitModel(t, h, flow.Rate{N: 100, Per: time.Second, Burst: 10})
			var mu sync.Mutex
			seen := map[string]int{}
			wf := steps.New[asked]("again", 1).
				Step("ask", func(ctx context.Context, s *steps.Context, a asked) (steps.Outcome[asked], error) {
					resource := "model"
					if a.N == 1 {
						resource = "free" // no limit
					}
					mu.Lock()
					seen[s.RunID()]++
					first := seen[s.RunID()] == 1
					mu.Unlock()
					switch {
					case first && a.N == 0:
						return steps.Outcome[asked]{}, errors.New("a failure, retried after 300ms")
					case first:
						return steps.Outcome[asked]{}, &steps.ThrottledError{Call: "provider", Resource: resource, Wait: 300 * time.Millisecond}
					}
					_, err := steps.Call(ctx, s, "provider", a, func(context.Context) (int, error) { return 1, nil }, steps.Resource(resource))
					return steps.Complete(a), err
				}, steps.WithRetry(steps.RetryPolicy{Attempts: 2, Backoff: 300 * time.Millisecond}))
			h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow = fl })
			h.start("again", "retried", `{"n":0}`)
			h.start("again", "unlimited", `{"n":1}`)
			for _, id := range []string{"retried", "unlimited"} {
				h.waitStatus(id, checkpoint.StatusCompleted, 20*time.Second)
				if cp := h.checkpoints(id)[0]; cp.Attempt != 2 || cp.TokenWaitMS != 0 || cp.TokenResource != "" {
					t.Errorf("%s: committed by delivery %d saying it waited %.1fms for tokens of %q; want delivery 2, no wait", id, cp.Attempt, cp.TokenWaitMS, cp.TokenResource)
				}
			}
		})
	}
}

// A branch of a fan-out commits its wait for tokens as a step does: of
// two branches under 1 call per 2 s, the second is handed back and says
// so in its checkpoint.
func TestBranchCheckpointSaysHowLongItWaitedForTokens(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			fl := limitModel(t, h, flow.Rate{N: 1, Per: 2 * time.Second, Burst: 1})
			w := steps.New[asked]("fanned", 1)
			join := w.Ref("join")
			ask := steps.AddBranch(w, "ask", func(ctx context.Context, s *steps.Context, in payIn) (int, error) {
				return steps.Call(ctx, s, "provider", in, func(context.Context) (int, error) { return in.I, nil }, steps.Resource("model"))
			}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
			w.Step("split", func(context.Context, *steps.Context, asked) (steps.Outcome[asked], error) {
				return steps.FanOut(join, asked{}, ask.With(payIn{I: 1}), ask.With(payIn{I: 2})), nil
			}).Step("join", func(_ context.Context, _ *steps.Context, a asked) (steps.Outcome[asked], error) {
				return steps.Complete(a), nil
			})
			h.startWorker(steps.NewRegistry().MustRegister(w), func(c *worker.Config) { c.Flow = fl })
			h.start("fanned", "fan-tok", `{}`)
			h.waitStatus("fan-tok", checkpoint.StatusCompleted, 20*time.Second)
			var waits []float64
			for i := 1; i <= 2; i++ {
				snap, err := h.store.Load(context.Background(), "fan-tok", checkpoint.AtBranch(2, i))
				if err != nil || snap.Current == nil {
					t.Fatalf("branch %d: %v, %v", i, snap.Current, err)
				}
				if cp := snap.Current; cp.TokenWaitMS > 0 {
					t.Logf("%s: branch %d committed by delivery %d, waited %.1fms for %q", kind, i, cp.Attempt, cp.TokenWaitMS, cp.TokenResource)
					if cp.TokenResource != "model" || cp.Attempt < 2 {
						t.Errorf("branch %d: waited %.1fms for %q, committed by delivery %d; want model, handed back", i, cp.TokenWaitMS, cp.TokenResource, cp.Attempt)
					}
					waits = append(waits, cp.TokenWaitMS)
				}
			}
			if len(waits) != 1 || waits[0] < 1000 {
				t.Errorf("token waits of the two branches: %v ms; want one, over the second a call sleeps in place", waits)
			}
		})
	}
}

// TestTokenWaitUnderARatePerKeyOnly: a step handed back for its tenant's
// rate per key (the resource has no rate over all keys) says so in its
// checkpoint, as one handed back for the resource's rate does. It said
// 0 ms: the worker looked for a rate over all keys only. (The flow store
// is NATS's whatever the checkpoint store, so one store is enough.)
func TestTokenWaitUnderARatePerKeyOnly(t *testing.T) {
	h := newHarness(t, "kv")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fl, err := flow.NewStore(ctx, h.js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.SetRatePerKey(ctx, "api", flow.Rate{N: 1, Per: 4 * time.Second, Burst: 1}, "test"); err != nil {
		t.Fatal(err)
	}
	wf := steps.New[tenantRun]("pertenant", 1).FairnessKey(func(in tenantRun) string { return in.Tenant })
	wf.Step("call", func(ctx context.Context, s *steps.Context, in tenantRun) (steps.Outcome[tenantRun], error) {
		_, err := steps.Call(ctx, s, "api", in, func(context.Context) (int, error) { return 1, nil }, steps.Resource("api"))
		return steps.Complete(in), err
	}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
	_, stop := h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow = fl })
	defer stop()
	h.start("pertenant", "a-1", `{"tenant":"a"}`)
	h.waitStatus("a-1", checkpoint.StatusCompleted, 20*time.Second)
	h.start("pertenant", "a-2", `{"tenant":"a"}`)
	h.waitStatus("a-2", checkpoint.StatusCompleted, 20*time.Second)
	cp := h.checkpoints("a-2")[0]
	if cp.Attempt < 2 {
		t.Fatalf("a-2 was not handed back (delivery %d): tenant a's rate of 1 per 4 s did not bind", cp.Attempt)
	}
	if cp.TokenWaitMS < 1000 || cp.TokenResource != "api" {
		t.Errorf("a-2 was handed back for its tenant's tokens (delivery %d) but its checkpoint says %.1fms of %q", cp.Attempt, cp.TokenWaitMS, cp.TokenResource)
	}
	t.Logf("a-2: delivery %d, waited up to %.0fms for tokens of %s", cp.Attempt, cp.TokenWaitMS, cp.TokenResource)
}
