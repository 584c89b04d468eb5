package worker_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

type tenantRun struct {
	Tenant string `json:"tenant"`
	N      int    `json:"n"`
	Urgent bool   `json:"urgent,omitempty"`
}

// modelFlow is a workflow of a step "prep" and a step "call" that uses
// resource "model" and waits d, counted in f; started reports the runs in
// the order their call began.
func modelFlow(d time.Duration, f *inFlight, started func(tenantRun)) *steps.Workflow[tenantRun] {
	w := steps.New[tenantRun]("modelflow", 1).FairnessKey(func(in tenantRun) string { return in.Tenant }).
		Priority(func(in tenantRun) int {
			if in.Urgent {
				return 1
			}
			return 0
		})
	call := w.Ref("call")
	w.Step("prep", func(_ context.Context, _ *steps.Context, st tenantRun) (steps.Outcome[tenantRun], error) {
		return steps.Next(call, st), nil
	})
	w.Step("call", func(ctx context.Context, _ *steps.Context, st tenantRun) (steps.Outcome[tenantRun], error) {
		f.enter()
		defer f.now.Add(-1)
		if started != nil {
			started(st)
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return steps.Outcome[tenantRun]{}, ctx.Err()
		}
		return steps.Complete(st), nil
	}, steps.Uses("model"))
	return w
}

// slotMetrics records the concurrency limits' metrics.
type slotMetrics struct {
	worker.NopMetrics
	mu                  sync.Mutex
	waited, peakWaiting int
}

func (m *slotMetrics) Throttled(string, bool)            {}
func (m *slotMetrics) TokenWaited(string, time.Duration) {}
func (m *slotMetrics) SlowedDown(string, time.Duration)  {}
func (m *slotMetrics) SlotWaited(string, time.Duration)  { m.mu.Lock(); m.waited++; m.mu.Unlock() }
func (m *slotMetrics) Slots(_ string, _, waiting int) {
	m.mu.Lock()
	m.peakWaiting = max(m.peakWaiting, waiting)
	m.mu.Unlock()
}

func flowStore(t *testing.T, h *harness, concurrency int) *flow.Store {
	t.Helper()
	st, err := flow.NewStore(context.Background(), h.js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetConcurrency(context.Background(), "model", concurrency, "test"); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestConcurrencyLimitHoldsAcrossWorkers: two workers of 8 slots each run
// 40 runs whose "call" step (100 ms) uses "model", limited to 3: never
// more than 3 calls at once, every run completes, and the metrics saw
// steps wait (for 1.3 s: the workers sample their queues every second).
func TestConcurrencyLimitHoldsAcrossWorkers(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			st := flowStore(t, h, 3)
			var f inFlight
			var m slotMetrics
			for range 2 {
				reg := steps.NewRegistry()
				if err := reg.Register(modelFlow(100*time.Millisecond, &f, nil)); err != nil {
					t.Fatal(err)
				}
				_, stop := h.startWorker(reg, func(c *worker.Config) { c.Flow, c.Concurrency, c.Metrics = st, 8, &m })
				defer stop()
			}
			for i := range 40 {
				h.start("modelflow", fmt.Sprintf("m-%02d", i), fmt.Sprintf(`{"tenant":"t%d","n":%d}`, i%4, i))
			}
			for i := range 40 {
				h.waitStatus(fmt.Sprintf("m-%02d", i), checkpoint.StatusCompleted, 60*time.Second)
			}
			if p := f.peak.Load(); p > 3 || p < 2 {
				t.Fatalf("at most %d calls at once; want 3 (the limit)", p)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.waited == 0 || m.peakWaiting == 0 {
				t.Errorf("metrics: %d slot waits, at most %d steps seen waiting; want some of each", m.waited, m.peakWaiting)
			}
			t.Logf("40 runs, at most %d calls at once; %d steps waited for a slot, at most %d seen waiting in a worker", f.peak.Load(), m.waited, m.peakWaiting)
		})
	}
}

// TestConcurrencyLimitIsFairBetweenTenants: with a limit of 1, tenant a
// queues 30 runs and then tenant b 3; b's calls all begin before 8 more
// of a's have. Then an urgent run of a, queued behind a's 20 others,
// begins next.
func TestConcurrencyLimitIsFairBetweenTenants(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			st := flowStore(t, h, 1)
			var f inFlight
			var mu sync.Mutex
			var order []string
			reg := steps.NewRegistry()
			if err := reg.Register(modelFlow(20*time.Millisecond, &f, func(r tenantRun) {
				mu.Lock()
				if r.Urgent {
					r.Tenant += "!"
				}
				order = append(order, r.Tenant)
				mu.Unlock()
			})); err != nil {
				t.Fatal(err)
			}
			_, stop := h.startWorker(reg, func(c *worker.Config) { c.Flow, c.Concurrency = st, 4 })
			defer stop()
			for i := range 30 {
				h.start("modelflow", fmt.Sprintf("a-%02d", i), `{"tenant":"a"}`)
			}
			// b comes once a's calls queue.
			deadline := time.Now().Add(20 * time.Second)
			for {
				mu.Lock()
				n := len(order)
				mu.Unlock()
				if n >= 2 || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			mu.Lock()
			before := len(order)
			mu.Unlock()
			for i := range 3 {
				h.start("modelflow", fmt.Sprintf("b-%02d", i), `{"tenant":"b"}`)
			}
			for i := range 3 {
				h.waitStatus(fmt.Sprintf("b-%02d", i), checkpoint.StatusCompleted, 60*time.Second)
			}
			mu.Lock()
			defer mu.Unlock()
			lastB := -1
			for i, k := range order {
				if k == "b" {
					lastB = i
				}
			}
			as := 0
			for _, k := range order[before:lastB] {
				if k == "a" {
					as++
				}
			}
			if as >= 8 || f.peak.Load() != 1 {
				t.Fatalf("%d of a's calls began between b's start and b's last call (peak %d): %v", as, f.peak.Load(), order)
			}
			t.Logf("b's 3 calls began within %d of a's", as)
			n := len(order)
			mu.Unlock()
			h.start("modelflow", "urgent", `{"tenant":"a","urgent":true}`)
			h.waitStatus("urgent", checkpoint.StatusCompleted, 60*time.Second)
			for i := range 30 {
				h.waitStatus(fmt.Sprintf("a-%02d", i), checkpoint.StatusCompleted, 60*time.Second)
			}
			mu.Lock()
			got := slices.Index(order[n:], "a!")
			if after := len(order[n:]) - got - 1; got > 2 || after < 5 {
				t.Errorf("the urgent run's call began after %d others and before %d (want at most 2 after it was queued, with a's still queued): %v", got, after, order[n:])
			}
			// The checkpoint says the call waited for its slot.
			cps := h.checkpoints("b-02")
			if len(cps) != 2 || cps[1].Resource != "model" || cps[1].SlotWaitMS <= 0 || cps[0].Resource != "" {
				t.Errorf("b-02's checkpoints do not say the call waited for a slot of model: %+v", cps)
			}
		})
	}
}

// TestQueuedRedeliveryIsResumedOnce: a step whose call is answered 429 is
// handed back; it comes back (a second delivery: one resume) and queues
// for the slot of its concurrency limit that another run holds; granted,
// it is handled again from the same delivery, which is not a second
// resume (it was counted twice: the review's item 4).
func TestQueuedRedeliveryIsResumedOnce(t *testing.T) {
	h := newHarness(t, "kv")
	st := flowStore(t, h, 1)
	if _, err := st.Set(context.Background(), "model", flow.Rate{N: 100, Per: time.Second, Burst: 10}, "test"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var refused atomic.Bool
	wf := steps.New[asked]("resumes", 1)
	wf.Step("ask", func(ctx context.Context, s *steps.Context, a asked) (steps.Outcome[asked], error) {
		_, err := steps.Call(ctx, s, "provider", a, func(context.Context) (int, error) {
			if a.N == 2 && refused.CompareAndSwap(false, true) {
				return 0, &tooMany{after: time.Second}
			}
			return 1, nil
		}, steps.Resource("model"))
		if err != nil {
			return steps.Outcome[asked]{}, err
		}
		if a.N == 1 {
			<-release // holds the slot while the second comes back and queues
		}
		return steps.Complete(a), nil
	}, steps.Uses("model"))
	m := &flowEvents{}
	h.startWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Flow, c.Metrics, c.Concurrency = st, m, 4 })
	h.start("resumes", "second", `{"n":2}`)
	eventuallyTrue(t, "the second run's call refused", refused.Load)
	h.start("resumes", "first", `{"n":1}`)
	time.Sleep(2500 * time.Millisecond) // the second is back, and queued
	close(release)
	h.waitStatus("first", checkpoint.StatusCompleted, 20*time.Second)
	h.waitStatus("second", checkpoint.StatusCompleted, 20*time.Second)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slowed != 1 || m.resumed != 1 {
		t.Errorf("%d resumes for %d 429s handed back; want 1 and 1", m.resumed, m.slowed)
	}
	if cps := h.checkpoints("second"); len(cps) != 1 || cps[0].SlotWaitMS < 500 {
		t.Errorf("the second run's checkpoint does not say it queued: %+v", cps)
	}
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// tenantPeaks counts the calls running at once per tenant.
type tenantPeaks struct {
	mu            sync.Mutex
	running, most map[string]int
}

func (p *tenantPeaks) enter(r tenantRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[r.Tenant]++
	p.most[r.Tenant] = max(p.most[r.Tenant], p.running[r.Tenant])
}

func (p *tenantPeaks) leave(r tenantRun) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[r.Tenant]--
}

// tenantFlow is modelFlow whose call step counts its tenant in p while it
// runs, for d (a second for tenants named "slow-…").
func tenantFlow(d time.Duration, f *inFlight, p *tenantPeaks) *steps.Workflow[tenantRun] {
	return modelFlow(0, f, func(r tenantRun) {
		p.enter(r)
		if strings.HasPrefix(r.Tenant, "slow-") {
			time.Sleep(time.Second)
		}
		time.Sleep(d)
		p.leave(r)
	})
}

// TestConcurrencyLimitPerTenant: "model" allows 2 calls at once per
// tenant and 3 over all; two workers run 30 runs of tenant a, 30 of b
// and 2 of c: no tenant ever has more than 2 calls at once across the
// workers, the fleet never more than 3, and every run completes. Then,
// at a limit of 1 over all keys with a slow call holding it, a worker
// stops with deliveries queued (some holding their tenant's slot while
// they wait for the resource's); it stops within 20 s, and its queued
// runs complete on the next worker.
func TestConcurrencyLimitPerTenant(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			st := flowStore(t, h, 3)
			if _, err := st.SetConcurrencyPerKey(context.Background(), "model", 2, "test"); err != nil {
				t.Fatal(err)
			}
			var f inFlight
			peaks := &tenantPeaks{running: map[string]int{}, most: map[string]int{}}
			var stops []func()
			for range 2 {
				reg := steps.NewRegistry()
				if err := reg.Register(tenantFlow(30*time.Millisecond, &f, peaks)); err != nil {
					t.Fatal(err)
				}
				_, stop := h.startWorker(reg, func(c *worker.Config) { c.Flow, c.Concurrency = st, 8 })
				stops = append(stops, stop)
			}
			var ids []string
			for i := range 62 {
				tenant := []string{"a", "b"}[i%2]
				if i >= 60 {
					tenant = "c"
				}
				id := fmt.Sprintf("%s-%02d", tenant, i)
				ids = append(ids, id)
				h.start("modelflow", id, fmt.Sprintf(`{"tenant":%q,"n":%d}`, tenant, i))
			}
			for _, id := range ids {
				h.waitStatus(id, checkpoint.StatusCompleted, 60*time.Second)
			}
			peaks.mu.Lock()
			most := maps.Clone(peaks.most)
			peaks.mu.Unlock()
			if most["a"] > 2 || most["b"] > 2 || most["c"] > 2 || f.peak.Load() > 3 {
				t.Fatalf("at most %v at once per tenant and %d over all; want at most 2 per tenant and 3 over all", most, f.peak.Load())
			}
			if f.peak.Load() < 3 {
				t.Errorf("at most %d at once over all: the tenants did not run beside each other", f.peak.Load())
			}
			t.Logf("62 runs: at most %v at once per tenant, %d over all", most, f.peak.Load())

			// A stop with deliveries holding their tenant's slot while
			// they wait for the resource's: the limit over all keys drops
			// to 1 and a slow call holds it.
			if _, err := st.SetConcurrency(context.Background(), "model", 1, "test"); err != nil {
				t.Fatal(err)
			}
			stops[1]()
			for i := range 6 {
				h.start("modelflow", fmt.Sprintf("late-%d", i), fmt.Sprintf(`{"tenant":"slow-%d"}`, i%3))
			}
			testenv.Eventually(t, 10*time.Second, "a slow call running", func() bool { return f.now.Load() == 1 })
			time.Sleep(200 * time.Millisecond)
			stopped := make(chan struct{})
			go func() { stops[0](); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(20 * time.Second):
				t.Fatal("the worker did not stop within 20 s with deliveries queued for the resource's slot")
			}
			reg := steps.NewRegistry()
			if err := reg.Register(tenantFlow(0, &f, peaks)); err != nil {
				t.Fatal(err)
			}
			_, stop := h.startWorker(reg, func(c *worker.Config) { c.Flow, c.Concurrency = st, 8 })
			defer stop()
			for i := range 6 {
				h.waitStatus(fmt.Sprintf("late-%d", i), checkpoint.StatusCompleted, 60*time.Second)
			}
		})
	}
}
