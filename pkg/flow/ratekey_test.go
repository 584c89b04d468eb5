package flow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

func setPerKeyRate(tb testing.TB, st *flow.Store, name string, r flow.Rate) {
	tb.Helper()
	if _, err := st.SetRatePerKey(ctxT(tb), name, r, "test"); err != nil {
		tb.Fatal(err)
	}
}

// keyTake is one TakeKey of key at a simulated time and the wait it must
// answer.
type keyTake struct {
	key      string
	at, wait time.Duration
}

func takeKeys(t *testing.T, st *flow.Store, takes []keyTake) {
	t.Helper()
	for i, tk := range takes {
		wait, err := st.TakeKey(ctxT(t), "model", tk.key, at(tk.at))
		if err != nil || wait != tk.wait {
			t.Fatalf("take %d of %s at +%s: wait %s, %v; want %s", i, tk.key, tk.at, wait, err, tk.wait)
		}
	}
}

// TestRatePerKey: each key takes its own tokens at the rate per key.
func TestRatePerKey(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{})
	setPerKeyRate(t, st, "model", flow.Rate{N: 2, Per: time.Second, Burst: 2})
	takeKeys(t, st, []keyTake{
		{"a", 0, 0}, {"a", 0, 0}, {"a", 0, ms(500)}, // a's burst, then its pace
		{"b", 0, 0}, {"b", 0, 0}, {"b", ms(100), ms(400)}, // b's own
		{"a", ms(500), 0}, {"a", ms(500), ms(500)},
		{"", 0, 0}, // the empty key is a key too
	})
}

// TestRatePerKeyWithinTheResourceRate: 3/s over all keys and 2/s per
// key. A key over its rate spends nothing of the resource's: after a's
// refusal, b still gets the resource's third token, and c then waits for
// the resource's.
func TestRatePerKeyWithinTheResourceRate(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{})
	st.SetClock(func() time.Time { return t0 })
	set(t, st, "model", flow.Rate{N: 3, Per: time.Second, Burst: 3})
	setPerKeyRate(t, st, "model", flow.Rate{N: 2, Per: time.Second, Burst: 2})
	takeKeys(t, st, []keyTake{
		{"a", 0, 0}, {"a", 0, 0},
		{"a", 0, ms(500)},         // a's own rate refuses
		{"b", 0, 0},               // the resource's third token, not spent by a's refusal
		{"c", 0, time.Second / 3}, // the resource's rate refuses c
	})
}

// TestRatePerKeyRecordsExpire: a key's record goes once its burst is full
// again (its TTL), so keys used once leave nothing stored.
func TestRatePerKeyRecordsExpire(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	setPerKeyRate(t, st, "model", flow.Rate{N: 10, Per: time.Second, Burst: 1})
	kv, err := js.KeyValue(ctxT(t), "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		keys, err := kv.ListKeysFiltered(ctxT(t), "t.>")
		if err != nil {
			return -1
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return n
	}
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		if wait, err := st.TakeKey(ctxT(t), "model", k, now); err != nil || wait != 0 {
			t.Fatalf("take of %s: %s, %v", k, wait, err)
		}
	}
	if n := count(); n != 3 {
		t.Fatalf("%d key records after 3 keys took a token; want 3", n)
	}
	eventually(t, "the keys' records expired", func() bool { return count() == 0 })
	t.Logf("3 keys' records gone %s after their tokens (burst refilled after 100ms; TTL whole seconds)", time.Since(now).Round(100*time.Millisecond))
	// A key whose record expired has its full burst.
	if wait, err := st.TakeKey(ctxT(t), "model", "a", time.Now()); err != nil || wait != 0 {
		t.Errorf("take of a after its record expired: %s, %v; want 0", wait, err)
	}
}

// TestLimiterTakesKeys: the Limiter reads the rates per key at its
// refresh; HasRatePerKey says which names need a key.
func TestLimiterTakesKeys(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{})
	lim := flow.NewLimiter(st, flow.LimiterOptions{Refresh: 50 * time.Millisecond})
	if ok, err := lim.HasRatePerKey(ctxT(t), "model"); ok || err != nil {
		t.Fatalf("HasRatePerKey before any is set: %v, %v", ok, err)
	}
	setPerKeyRate(t, st, "model", flow.Rate{N: 1, Per: time.Second, Burst: 1})
	eventually(t, "the limiter sees the rate per key", func() bool {
		ok, err := lim.HasRatePerKey(ctxT(t), "model")
		return ok && err == nil
	})
	for i, tk := range []keyTake{{"a", 0, 0}, {"a", 0, time.Second}, {"b", 0, 0}} {
		if wait, err := lim.TakeKey(ctxT(t), "model", tk.key, at(tk.at)); err != nil || wait != tk.wait {
			t.Fatalf("take %d of %s: %s, %v; want %s", i, tk.key, wait, err, tk.wait)
		}
	}
	// A name with neither rate costs no round trip and takes nothing.
	if wait, err := lim.TakeKey(ctxT(t), "other", "a", at(0)); err != nil || wait != 0 {
		t.Errorf("take of a name with no limit: %s, %v", wait, err)
	}
	if err := st.DeleteRatePerKey(ctxT(t), "model"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the limiter sees the rate per key gone", func() bool {
		ok, err := lim.HasRatePerKey(ctxT(t), "model")
		return !ok && err == nil
	})
}

// TestRatePerKeyRefusesBadInput: bad names and rates change nothing.
func TestRatePerKeyRefusesBadInput(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{MaxLimits: 1})
	if _, err := st.SetRatePerKey(ctxT(t), "model", flow.Rate{N: 0, Per: time.Second, Burst: 1}, "t"); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("rate 0: %v; want ErrBadLimit", err)
	}
	if _, err := st.SetRatePerKey(ctxT(t), "a..b", flow.Rate{N: 1, Per: time.Second, Burst: 1}, "t"); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("bad name: %v; want ErrBadLimit", err)
	}
	setPerKeyRate(t, st, "model", flow.Rate{N: 1, Per: time.Second, Burst: 1})
	if _, err := st.SetRatePerKey(ctxT(t), "other", flow.Rate{N: 1, Per: time.Second, Burst: 1}, "t"); !errors.Is(err, flow.ErrTooMany) {
		t.Errorf("a second rate per key past MaxLimits 1: %v; want ErrTooMany", err)
	}
	l, err := st.RatePerKey(ctxT(t), "model")
	if err != nil || l.Rate.N != 1 || l.SetBy != "test" {
		t.Errorf("RatePerKey: %+v, %v", l, err)
	}
	if _, err := st.RatePerKey(ctxT(t), "other"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("RatePerKey of a name with none: %v; want ErrNotFound", err)
	}
}
