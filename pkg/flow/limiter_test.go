package flow_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// After its first refresh a Limiter answers for a name with no limit
// without the store: it does so with the connection closed.
func TestLimiterNoRoundTrip(t *testing.T) {
	srv := testenv.StartNATS(t)
	admin, _ := newStore(t, srv, flow.StoreOptions{})
	set(t, admin, "model", flow.Rate{N: 10, Per: time.Second, Burst: 5})
	nc, js := srv.Connect(t)
	st, err := flow.NewStore(ctxT(t), js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lim := flow.NewLimiter(st, flow.LimiterOptions{Refresh: time.Hour})
	ctx := ctxT(t)
	if wait, err := lim.Take(ctx, "free", t0); wait != 0 || err != nil {
		t.Fatalf("first take: %s, %v", wait, err)
	}
	nc.Close()
	for range 1000 {
		if wait, err := lim.Take(ctx, "free", t0); wait != 0 || err != nil {
			t.Fatalf("take of a name with no limit, connection closed: %s, %v", wait, err)
		}
	}
	if _, err := lim.Take(ctx, "model", t0); err == nil {
		t.Error("take of a limit with the connection closed: no error")
	}
	if _, err := lim.Take(ctx, "bad name", t0); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("take of a bad name: %v", err)
	}
}

// A limit set, or deleted, elsewhere reaches a Limiter within its Refresh.
func TestLimiterRefresh(t *testing.T) {
	srv := testenv.StartNATS(t)
	admin, _ := newStore(t, srv, flow.StoreOptions{})
	st, _ := newStore(t, srv, flow.StoreOptions{})
	lim := flow.NewLimiter(st, flow.LimiterOptions{Refresh: 200 * time.Millisecond})
	ctx := ctxT(t)
	if wait, err := lim.Take(ctx, "model", t0); wait != 0 || err != nil {
		t.Fatalf("take before the limit: %s, %v", wait, err)
	}
	set(t, admin, "model", flow.Rate{N: 1, Per: time.Hour, Burst: 1})
	if wait, _ := admin.Take(ctx, "model", t0); wait != 0 {
		t.Fatalf("admin's take: %s", wait)
	}
	eventually(t, "the Limiter to see the limit", func() bool {
		wait, err := lim.Take(ctx, "model", t0)
		return err == nil && wait == time.Hour
	})
	if err := admin.Delete(ctx, "model"); err != nil {
		t.Fatal(err)
	}
	// Seen at once: the Limiter reads a name it holds on every Take.
	if wait, err := lim.Take(ctx, "model", t0); wait != 0 || err != nil {
		t.Errorf("take after delete: %s, %v", wait, err)
	}
}

// SlowDownOn: a rate-limit answer blocks the name fleet-wide, a limit
// or not; any other error changes nothing.
func TestLimiterSlowDownOn(t *testing.T) {
	srv := testenv.StartNATS(t)
	st1, _ := newStore(t, srv, flow.StoreOptions{})
	st2, _ := newStore(t, srv, flow.StoreOptions{})
	w1 := flow.NewLimiter(st1, flow.LimiterOptions{Refresh: time.Hour})
	w2 := flow.NewLimiter(st2, flow.LimiterOptions{Refresh: 200 * time.Millisecond})
	ctx := ctxT(t)
	set(t, st1, "model", flow.Rate{N: 10, Per: time.Second, Burst: 5})
	for _, lim := range []*flow.Limiter{w1, w2} { // both have read the names
		if wait, err := lim.Take(ctx, "model", t0); wait != 0 || err != nil {
			t.Fatalf("take: %s, %v", wait, err)
		}
	}

	for _, err := range []error{nil, errors.New("HTTP 500"), &notLimited{}} {
		if d, serr := w1.SlowDownOn(ctx, "model", err, t0); d != 0 || serr != nil {
			t.Errorf("SlowDownOn(%v): %s, %v", err, d, serr)
		}
	}
	if l, _ := st1.Get(ctx, "model"); !l.BlockedUntil.IsZero() {
		t.Errorf("blocked by errors that are no rate-limit answer: %+v", l)
	}

	// A limit: every Limiter's next Take sees it.
	if d, err := w1.SlowDownOn(ctx, "model", &tooMany{after: 2 * time.Second}, t0); d != 2*time.Second || err != nil {
		t.Fatalf("SlowDownOn 429: %s, %v", d, err)
	}
	for _, lim := range []*flow.Limiter{w1, w2} {
		if wait, _ := lim.Take(ctx, "model", at(ms(500))); wait != ms(1500) {
			t.Errorf("take after the 429: %s; want 1.5s", wait)
		}
	}

	// No limit: the Limiter that slowed it down sees it at once, others
	// within their Refresh.
	if d, err := w2.SlowDownOn(ctx, "search-api", &tooMany{}, t0); d != time.Second || err != nil {
		t.Fatalf("SlowDownOn 429 with no Retry-After: %s, %v", d, err)
	}
	if wait, _ := w2.Take(ctx, "search-api", t0); wait != time.Second {
		t.Errorf("take of the name slowed down: %s; want 1s", wait)
	}
	if wait, _ := st1.Take(ctx, "search-api", t0); wait != time.Second {
		t.Errorf("store's take of the name slowed down: %s; want 1s", wait)
	}
	if wait, _ := w1.Take(ctx, "search-api", t0); wait != 0 {
		t.Errorf("a Limiter with a refresh of an hour saw the new name: %s", wait)
	}
	if d, _ := w1.SlowDownOn(ctx, "search-api", &tooMany{after: time.Hour}, t0); d != 5*time.Minute {
		t.Errorf("SlowDownOn an hour: %s; want at most 5m", d)
	}
	if wait, _ := w1.Take(ctx, "search-api", t0); wait != 5*time.Minute {
		t.Errorf("take after the long 429: %s", wait)
	}
}

// Many Takes of a fresh Limiter at once: one refresh, no race.
func TestLimiterConcurrent(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{})
	set(t, st, "model", flow.Rate{N: 1000, Per: time.Second, Burst: 1000})
	lim := flow.NewLimiter(st, flow.LimiterOptions{Refresh: ms(5)})
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 8 {
		wg.Go(func() {
			for i := range 50 {
				name := "model"
				if i%2 == 1 {
					name = "free"
				}
				wait, err := lim.Take(ctx, name, t0)
				if err != nil {
					t.Error(err)
					return
				}
				if wait == 0 && name == "model" {
					mu.Lock()
					taken++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if l, _ := st.Get(ctx, "model"); taken == 0 || taken > 200 || l.Rate.N != 1000 {
		t.Errorf("took %d of model", taken)
	}
}

// notLimited says it is no rate-limit answer (a 500 from the same adapter).
type notLimited struct{}

func (*notLimited) Error() string                      { return "HTTP 500" }
func (*notLimited) RateLimited() (time.Duration, bool) { return 0, false }
