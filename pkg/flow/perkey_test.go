package flow_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// peak counts calls running at once, overall and per key.
type peak struct {
	mu            sync.Mutex
	running, most map[string]int
}

func newPeak() *peak { return &peak{running: map[string]int{}, most: map[string]int{}} }

func (p *peak) enter(keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.running[k]++
		p.most[k] = max(p.most[k], p.running[k])
	}
}

func (p *peak) leave(keys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.running[k]--
	}
}

func (p *peak) max(k string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.most[k]
}

func setPerKey(tb testing.TB, st *flow.Store, name string, n int) {
	tb.Helper()
	if _, err := st.SetConcurrencyPerKey(ctxT(tb), name, n, "test"); err != nil {
		tb.Fatal(err)
	}
}

// runCalls makes n calls of name through pools (in turn), key keys[i%len],
// each holding its slot for hold, and returns how many ran.
func runCalls(t *testing.T, pools []*flow.Pool, name string, keys []string, n int, hold time.Duration, pk *peak) int64 {
	t.Helper()
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := keys[i%len(keys)]
			s := acquire(t, pools[i%len(pools)], name, key)
			pk.enter("all", key)
			time.Sleep(hold)
			pk.leave("all", key)
			done.Add(1)
			s.Release()
		})
	}
	wg.Wait()
	return done.Load()
}

// TestPoolPerKeyLimitHoldsAcrossProcesses: a limit of 2 per key, none
// over all keys, three pools, four keys: no key ever runs more than 2 at
// once across the pools, and the keys run beside each other (more than
// 2 at once over all).
func TestPoolPerKeyLimitHoldsAcrossProcesses(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	_, st := pool(t, srv, 0)
	setPerKey(t, st, "model", 2)
	var pools []*flow.Pool
	for range 3 {
		p, _ := pool(t, srv, 0)
		eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
		pools = append(pools, p)
	}
	keys := []string{"tenant-a", "tenant-b", "tenant-c", ""}
	pk := newPeak()
	if done := runCalls(t, pools, "model", keys, 120, 15*time.Millisecond, pk); done != 120 {
		t.Fatalf("%d of 120 calls ran", done)
	}
	for _, k := range keys {
		if pk.max(k) > 2 {
			t.Errorf("key %q ran %d at once, limit 2 per key", k, pk.max(k))
		}
	}
	if pk.max("all") <= 2 {
		t.Errorf("at most %d at once over all keys: the keys did not run beside each other", pk.max("all"))
	}
	t.Logf("120 calls; at most %d at once over all, per key %d %d %d %d", pk.max("all"),
		pk.max(keys[0]), pk.max(keys[1]), pk.max(keys[2]), pk.max(keys[3]))
}

// TestPoolPerKeyLimitWithinALimitOverAllKeys: 2 per key and 3 over all,
// two pools: neither bound is passed, and the key with one call waiting
// behind another key's many is served in turn.
func TestPoolPerKeyLimitWithinALimitOverAllKeys(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	_, st := pool(t, srv, 0)
	setPerKey(t, st, "model", 2)
	if _, err := st.SetConcurrency(ctxT(t), "model", 3, "test"); err != nil {
		t.Fatal(err)
	}
	var pools []*flow.Pool
	for range 2 {
		p, _ := pool(t, srv, 0)
		eventually(t, "the pool sees the limits", func() bool { return p.Limited("model") })
		pools = append(pools, p)
	}
	pk := newPeak()
	if done := runCalls(t, pools, "model", []string{"a", "b", "c", "d", "e"}, 100, 10*time.Millisecond, pk); done != 100 {
		t.Fatalf("%d of 100 calls ran", done)
	}
	if pk.max("all") > 3 {
		t.Errorf("%d at once over all keys, limit 3", pk.max("all"))
	}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if pk.max(k) > 2 {
			t.Errorf("key %s ran %d at once, limit 2 per key", k, pk.max(k))
		}
	}
	if pk.max("all") < 3 {
		t.Errorf("at most %d at once: the limit of 3 was not used", pk.max("all"))
	}
}

// keyRecords lists the KV keys of the per-key leases stored.
func keyRecords(tb testing.TB, js jetstream.JetStream) []string {
	tb.Helper()
	kv, err := js.KeyValue(ctxT(tb), "durable_limits")
	if err != nil {
		tb.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctxT(tb), "k.>")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for k := range keys.Keys() {
		out = append(out, k)
	}
	return out
}

// TestPoolIdleKeysLeaveNoRecord: a key's record lives while the key is
// busy and is purged once its pool has given its slots back; a hundred
// keys used once leave nothing stored.
func TestPoolIdleKeysLeaveNoRecord(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	lease := time.Second
	p, st := pool(t, srv, lease)
	js := jsOf(t, srv)
	setPerKey(t, st, "model", 1)
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	var slots []*flow.Slot
	for i := range 100 {
		slots = append(slots, acquire(t, p, "model", fmt.Sprintf("tenant-%d", i)))
	}
	eventually(t, "100 key records", func() bool { return len(keyRecords(t, js)) == 100 })
	l, err := st.ConcurrencyPerKey(ctxT(t), "model")
	if err != nil || len(l.Keys) != 100 || l.Keys[0].Held != 1 || l.Keys[0].Key != "tenant-0" {
		t.Fatalf("ConcurrencyPerKey: %d keys (%+v), %v; want 100 holding 1", len(l.Keys), l.Keys[:min(len(l.Keys), 1)], err)
	}
	for _, s := range slots {
		s.Release()
	}
	released := time.Now()
	eventually(t, "the key records purged", func() bool { return len(keyRecords(t, js)) == 0 })
	t.Logf("100 idle keys' records purged %s after their slots were released (lease %s)", time.Since(released).Round(time.Millisecond), lease)
	if got := p.Stats(); len(got) != 1 || got[0].Keys != 0 || got[0].PerKey != 1 {
		t.Errorf("stats %+v; want model, per key 1, no key busy", got)
	}
}

// TestPoolDeadKeyRecordIsSweptByAnother: a process holding a key's slot
// dies; another pool purges the key's record once its lease has run out,
// though no caller there ever used that key.
func TestPoolDeadKeyRecordIsSweptByAnother(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	lease := 2 * time.Second
	live, st := pool(t, srv, lease)
	js := jsOf(t, srv)
	setPerKey(t, st, "model", 1)
	nc, djs := srv.Connect(t)
	dst, err := flow.NewStore(ctxT(t), djs, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := flow.NewPool(ctxT(t), dst, flow.PoolOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pools see the limit", func() bool { return dead.Limited("model") && live.Limited("model") })
	acquire(t, dead, "model", "tenant-x")
	eventually(t, "the key's record", func() bool { return len(keyRecords(t, js)) == 1 })
	nc.Close() // killed: its lease stays until it runs out
	died := time.Now()
	dead.Close()
	eventually(t, "the dead key's record swept", func() bool { return len(keyRecords(t, js)) == 0 })
	if took := time.Since(died); took > lease*2 {
		t.Errorf("swept %s after the holder died; want within %s (lease %s and a third)", took, lease*2, lease)
	}
	t.Logf("swept %s after the holder died (lease %s)", time.Since(died).Round(time.Millisecond), lease)
	// The key is usable at once by the live pool.
	acquire(t, live, "model", "tenant-x").Release()
}

// TestPoolCancelWhileWaitingForTheResourceGivesItsKeySlotBack: a caller
// holding its key's slot while it waits for the resource's is cancelled;
// its key's slot goes to the next caller of that key (a cancel that kept
// it would leave that key stuck for good).
func TestPoolCancelWhileWaitingForTheResourceGivesItsKeySlotBack(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	setPerKey(t, st, "model", 1)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limits", func() bool {
		s := p.Stats()
		return len(s) == 1 && s[0].Limit == 1 && s[0].PerKey == 1
	})
	held := acquire(t, p, "model", "a")
	s, tk := p.Acquire("model", flow.Queue{Key: "b"}, func(*flow.Slot) { t.Error("a cancelled caller was granted") })
	if s != nil {
		t.Fatal("not queued")
	}
	if !tk.Cancel() {
		t.Fatal("Cancel: already granted")
	}
	got := make(chan *flow.Slot, 1)
	if s, _ := p.Acquire("model", flow.Queue{Key: "b"}, func(s *flow.Slot) { got <- s }); s != nil {
		t.Fatal("not queued behind a's call")
	}
	held.Release()
	select {
	case s := <-got:
		s.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("key b's next caller got no slot: the cancelled caller kept its key's slot")
	}
}

// TestPoolPerKeyLimitChangedOrDeleted: a per-key limit raised lets more
// of a key's queued callers start; deleted, every caller queued starts.
func TestPoolPerKeyLimitChangedOrDeleted(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	js := jsOf(t, srv)
	setPerKey(t, st, "model", 1)
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	first := acquire(t, p, "model", "a")
	started := make(chan *flow.Slot, 4)
	for range 4 {
		if s, _ := p.Acquire("model", flow.Queue{Key: "a"}, func(s *flow.Slot) { started <- s }); s != nil {
			t.Fatal("not queued")
		}
	}
	setPerKey(t, st, "model", 2)
	var slots []*flow.Slot
	select {
	case s := <-started:
		slots = append(slots, s)
	case <-time.After(5 * time.Second):
		t.Fatal("limit raised to 2: no queued caller started")
	}
	select {
	case <-started:
		t.Fatal("limit 2: a third call started")
	case <-time.After(200 * time.Millisecond):
	}
	if err := st.DeleteConcurrencyPerKey(ctxT(t), "model"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case s := <-started:
			slots = append(slots, s)
		case <-time.After(5 * time.Second):
			t.Fatal("limit deleted: queued callers not started")
		}
	}
	first.Release()
	for _, s := range slots {
		s.Release()
	}
	if p.Limited("model") {
		t.Error("still limited")
	}
	eventually(t, "the lifted key's record purged", func() bool { return len(keyRecords(t, js)) == 0 })
	if _, err := st.ConcurrencyPerKey(ctxT(t), "model"); !errors.Is(err, flow.ErrNotFound) {
		t.Errorf("ConcurrencyPerKey after delete: %v; want ErrNotFound", err)
	}
}

// TestPerKeyLimitRefusesBadInput: bad names and values change nothing.
func TestPerKeyLimitRefusesBadInput(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{MaxLimits: 1})
	for _, n := range []int{0, -1, flow.MaxConcurrency + 1} {
		if _, err := st.SetConcurrencyPerKey(ctxT(t), "model", n, "t"); !errors.Is(err, flow.ErrBadLimit) {
			t.Errorf("per key %d: %v; want ErrBadLimit", n, err)
		}
	}
	if _, err := st.SetConcurrencyPerKey(ctxT(t), "a..b", 1, "t"); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("bad name: %v; want ErrBadLimit", err)
	}
	setPerKey(t, st, "model", 1)
	if _, err := st.SetConcurrencyPerKey(ctxT(t), "other", 1, "t"); !errors.Is(err, flow.ErrTooMany) {
		t.Errorf("a second per-key limit past MaxLimits 1: %v; want ErrTooMany", err)
	}
	all, err := st.ConcurrencyPerKeyList(ctxT(t))
	if err != nil || len(all) != 1 || all[0].Name != "model" || all[0].PerKey != 1 || all[0].SetBy != "test" {
		t.Errorf("list %+v, %v; want model 1 set by test", all, err)
	}
	if len(all) == 1 && time.Since(all[0].SetAt) > time.Minute {
		t.Errorf("set at %v; want now", all[0].SetAt)
	}
}

// TestPoolFollowsTheLimitsAfterItsWatchEnds: the pool's watch ends (its
// subscription closed); meanwhile one limit is deleted, another set and a
// per-key limit set. The pool watches again and follows all three: the
// caller queued under the deleted limit starts. (Before, a watch that
// ended left the pool following nothing for good.)
func TestPoolFollowsTheLimitsAfterItsWatchEnds(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	held := acquire(t, p, "model", "a")
	defer held.Release()
	started := make(chan *flow.Slot, 1)
	if s, _ := p.Acquire("model", flow.Queue{Key: "b"}, func(s *flow.Slot) { started <- s }); s != nil {
		t.Fatal("not queued")
	}
	p.EndWatch(func() {
		if err := st.DeleteConcurrency(ctxT(t), "model"); err != nil {
			t.Error(err)
		}
		if _, err := st.SetConcurrency(ctxT(t), "db", 1, "test"); err != nil {
			t.Error(err)
		}
		setPerKey(t, st, "tenantapi", 1)
	})
	select {
	case s := <-started:
		s.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("the caller queued under a limit deleted while the watch was down did not start")
	}
	eventually(t, "the pool follows the limits again", func() bool {
		return !p.Limited("model") && p.Limited("db") && p.Limited("tenantapi")
	})
	// And it follows changes made after it watches again.
	if err := st.DeleteConcurrency(ctxT(t), "db"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees db deleted", func() bool { return !p.Limited("db") })
}
