package flow_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

func TestFairQueueServesKeysInTurnAndEachInOrder(t *testing.T) {
	got := flow.QueueOrder([]string{"a", "a", "a", "b", "a", "c", "b"}, nil)
	want := []string{"a", "b", "c", "a", "b", "a", "a"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	// Removing callers (cancelled) keeps the others' order and turns.
	got = flow.QueueOrder([]string{"a", "b", "b", "c", "a"}, []int{1, 3})
	want = []string{"a", "b", "a"}
	if !slices.Equal(got, want) {
		t.Errorf("order after removals %v, want %v", got, want)
	}
	// A higher priority goes first, keys still in turn within it.
	got = flow.QueueOrder([]string{"a", "a", "b@2", "a@2", "b@2", "c@-1", "b"}, []int{4})
	want = []string{"b@2", "a@2", "a", "b", "a", "c@-1"}
	if !slices.Equal(got, want) {
		t.Errorf("order with priorities %v, want %v", got, want)
	}
}

// pool opens a pool on its own connection to srv, as another process
// would, and closes it when the test ends.
func pool(tb testing.TB, srv *testenv.NATS, lease time.Duration) (*flow.Pool, *flow.Store) {
	tb.Helper()
	st, _ := newStore(tb, srv, flow.StoreOptions{})
	p, err := flow.NewPool(ctxT(tb), st, flow.PoolOptions{Lease: lease})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p, st
}

// acquire takes a slot of name from p, waiting for it if queued.
func acquire(tb testing.TB, p *flow.Pool, name, key string) *flow.Slot {
	tb.Helper()
	got := make(chan *flow.Slot, 1)
	s, _ := p.Acquire(name, flow.Queue{Key: key}, func(s *flow.Slot) { got <- s })
	if s != nil {
		return s
	}
	select {
	case s := <-got:
		return s
	case <-time.After(8 * time.Second):
		tb.Fatalf("no slot of %s within 20 s", name)
		return nil
	}
}

func TestPoolUnlimitedNameNeedsNoRoundTrip(t *testing.T) {
	srv := testenv.StartNATS(t)
	p, _ := pool(t, srv, 0)
	for range 1000 {
		s, tk := p.Acquire("nobody-limits-this", flow.Queue{Key: "k"}, func(*flow.Slot) { t.Error("queued") })
		if s == nil || tk != nil {
			t.Fatal("a name with no limit queued")
		}
		s.Release()
	}
	if p.Limited("nobody-limits-this") {
		t.Error("limited")
	}
}

// TestPoolHoldsTheLimitAcrossProcesses: three pools on their own
// connections run calls of a limit of 3; never more than 3 run at once,
// and every call runs.
func TestPoolHoldsTheLimitAcrossProcesses(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, st := pool(t, srv, 0)
	if _, err := st.SetConcurrency(ctxT(t), "model", 3, "test"); err != nil {
		t.Fatal(err)
	}
	pools := []*flow.Pool{}
	for range 3 {
		p, _ := pool(t, srv, 0)
		eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
		pools = append(pools, p)
	}
	var running, most, done atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			s := acquire(t, pools[i%3], "model", fmt.Sprint(i%5))
			n := running.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			done.Add(1)
			s.Release()
		})
	}
	wg.Wait()
	if done.Load() != 60 {
		for _, p := range pools {
			t.Logf("pool %s: %+v", p.ID(), p.Stats())
		}
		s, err := st.Concurrency(ctxT(t), "model")
		t.Logf("record %+v %v", s, err)
	}
	if done.Load() != 60 || most.Load() > 3 {
		t.Fatalf("%d calls ran, at most %d at once; want 60, at most 3", done.Load(), most.Load())
	}
	if most.Load() < 2 {
		t.Errorf("at most %d at once: the limit of 3 was not used", most.Load())
	}
	t.Logf("60 calls, at most %d at once", most.Load())
}

// TestPoolSlotsOfADeadProcessComeBackAfterItsLease: a process holding
// every slot dies (its connection closes, it gives nothing back); a
// caller queued elsewhere starts once the dead one's lease has run out.
func TestPoolSlotsOfADeadProcessComeBackAfterItsLease(t *testing.T) {
	srv := testenv.StartNATS(t)
	lease := 2 * time.Second
	st, _ := newStore(t, srv, flow.StoreOptions{})
	if _, err := st.SetConcurrency(ctxT(t), "model", 2, "test"); err != nil {
		t.Fatal(err)
	}
	nc, js := srv.Connect(t)
	dst, err := flow.NewStore(ctxT(t), js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := flow.NewPool(ctxT(t), dst, flow.PoolOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	acquire(t, dead, "model", "a")
	acquire(t, dead, "model", "a")
	eventually(t, "the lease written", func() bool {
		s, err := st.Concurrency(ctxT(t), "model")
		return err == nil && s.Held == 2
	})
	nc.Close() // killed: its lease stays until it runs out
	died := time.Now()
	dead.Close()

	live, _ := pool(t, srv, lease)
	acquire(t, live, "model", "b")
	waited := time.Since(died)
	if waited > lease+time.Second {
		t.Errorf("the dead process's slot came back after %s, lease %s", waited, lease)
	}
	t.Logf("slot back %s after the holder died (lease %s)", waited.Round(time.Millisecond), lease)
}

// TestPoolIsFairBetweenKeys: with a limit of 1, key a queues 100 calls,
// then key b 5; b's calls all start before a's 10th.
func TestPoolIsFairBetweenKeys(t *testing.T) {
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	first := acquire(t, p, "model", "a")
	var mu sync.Mutex
	var order []string
	slots := make(chan *flow.Slot, 200)
	queue := func(key string) {
		s, _ := p.Acquire("model", flow.Queue{Key: key}, func(s *flow.Slot) {
			mu.Lock()
			order = append(order, key)
			mu.Unlock()
			slots <- s
		})
		if s != nil {
			t.Fatal("a slot free while one is held with a limit of 1")
		}
	}
	for range 100 {
		queue("a")
	}
	for range 5 {
		queue("b")
	}
	first.Release()
	for range 105 {
		(<-slots).Release()
	}
	lastB := slices.Index(order, "b")
	for i, k := range order {
		if k == "b" {
			lastB = i
		}
	}
	as := 0
	for _, k := range order[:lastB] {
		if k == "a" {
			as++
		}
	}
	if as >= 10 {
		t.Errorf("%d of a's calls started before b's last: %v", as, order[:lastB+1])
	}
	t.Logf("b's 5 calls started after %d of a's 100", as)
}

// TestPoolLimitThatDoesNotBindWritesALeasePeriodNotACall: 5,000 calls
// under a limit of 1,000 change the limit's record a few times, not once
// a call.
func TestPoolLimitThatDoesNotBindWritesALeasePeriodNotACall(t *testing.T) {
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1000, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	kv, err := jsOf(t, srv).KeyValue(ctxT(t), "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	before, _ := kv.Get(ctxT(t), "c.model")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 625 {
				acquire(t, p, "model", "k").Release()
			}
		})
	}
	wg.Wait()
	after, _ := kv.Get(ctxT(t), "c.model")
	writes := after.Revision() - before.Revision()
	if writes > 20 {
		t.Errorf("5,000 calls wrote the record %d times", writes)
	}
	t.Logf("5,000 calls, 8 at once, under a limit of 1,000: %d writes", writes)
}

// TestPoolDeletedLimitStartsEveryoneQueued: callers queued when the
// limit is deleted start at once.
func TestPoolDeletedLimitStartsEveryoneQueued(t *testing.T) {
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	held := acquire(t, p, "model", "a")
	started := make(chan struct{}, 3)
	for range 3 {
		if s, _ := p.Acquire("model", flow.Queue{Key: "a"}, func(*flow.Slot) { started <- struct{}{} }); s != nil {
			t.Fatal("not queued")
		}
	}
	if err := st.DeleteConcurrency(ctxT(t), "model"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("queued callers not started after the limit was deleted")
		}
	}
	held.Release()
	if p.Limited("model") {
		t.Error("still limited")
	}
}

func jsOf(tb testing.TB, srv *testenv.NATS) jetstream.JetStream {
	tb.Helper()
	_, js := srv.Connect(tb)
	return js
}

// TestPoolKeepsSlotsItKeepsUsing: a pool that uses a slot every few
// milliseconds for longer than its lease keeps holding it: each call
// finds it free here, with no round trip (a pool that took "idle at one
// look" for "idle for a lease" gave its slots back under steady use).
func TestPoolKeepsSlotsItKeepsUsing(t *testing.T) {
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, time.Second)
	if _, err := st.SetConcurrency(ctxT(t), "model", 10, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	acquire(t, p, "model", "k").Release()
	missed := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		s := p.TryAcquire("model")
		if s == nil {
			missed++
			s = acquire(t, p, "model", "k")
		}
		s.Release()
		time.Sleep(20 * time.Millisecond)
	}
	if missed > 0 {
		t.Errorf("%d calls found no slot free in a pool using one of a limit of 10 all along", missed)
	}
}

// busy keeps n callers of p acquiring name, each holding for hold, until stop.
func busy(t *testing.T, p *flow.Pool, name string, n int, hold time.Duration, running *atomic.Int64, most *atomic.Int64, stop chan struct{}, wg *sync.WaitGroup) {
	for range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				got := make(chan *flow.Slot, 1)
				s, _ := p.Acquire(name, flow.Queue{Key: "a"}, func(s *flow.Slot) { got <- s })
				if s == nil {
					select {
					case s = <-got:
					case <-stop:
						// leak the ticket; fine for a test
						return
					}
				}
				r := running.Add(1)
				for {
					m := most.Load()
					if r <= m || most.CompareAndSwap(m, r) {
						break
					}
				}
				time.Sleep(hold)
				running.Add(-1)
				s.Release()
			}
		})
	}
}

// TestPoolLimitOfOneIsSharedBetweenBusyPools: with a limit of 1, a pool
// kept busy by three callers gives its slot up in turn to a caller queued
// in another pool (a pool at its rounded-up share once never yielded, and
// the other pool's caller starved). Found by a review.
func TestPoolLimitOfOneIsSharedBetweenBusyPools(t *testing.T) {
	srv := testenv.StartNATS(t)
	a, st := pool(t, srv, 2*time.Second)
	b, _ := pool(t, srv, 2*time.Second)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "limited", func() bool { return a.Limited("model") && b.Limited("model") })
	var running, most atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	busy(t, a, "model", 3, 20*time.Millisecond, &running, &most, stop, &wg)
	time.Sleep(300 * time.Millisecond)
	got := make(chan *flow.Slot, 1)
	began := time.Now()
	s, _ := b.Acquire("model", flow.Queue{Key: "b"}, func(s *flow.Slot) { got <- s })
	if s == nil {
		select {
		case s = <-got:
		case <-time.After(8 * time.Second):
		}
	}
	close(stop)
	t.Logf("pool b's caller: slot %v after %s; stats a %+v b %+v", s != nil, time.Since(began), a.Stats(), b.Stats())
	if s == nil {
		t.Error("pool b's caller never got the slot while pool a stayed busy")
	} else {
		s.Release()
	}
	wg.Wait()
}

// TestPoolLoweredLimitBindsABusyPool: a limit lowered from 10 to 2 binds
// a pool kept busy by 20 callers within its lease (a pool once kept what
// it held while it used it). Found by a review.
func TestPoolLoweredLimitBindsABusyPool(t *testing.T) {
	srv := testenv.StartNATS(t)
	a, st := pool(t, srv, 2*time.Second)
	if _, err := st.SetConcurrency(ctxT(t), "model", 10, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "limited", func() bool { return a.Limited("model") })
	var running, most atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	busy(t, a, "model", 20, 20*time.Millisecond, &running, &most, stop, &wg)
	time.Sleep(time.Second)
	if _, err := st.SetConcurrency(ctxT(t), "model", 2, "test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // > 2 leases
	most.Store(0)
	time.Sleep(time.Second)
	m := most.Load()
	close(stop)
	rec, _ := st.Concurrency(ctxT(t), "model")
	t.Logf("after lowering to 2: at most %d at once; stats %+v; record %+v", m, a.Stats(), rec)
	if m > 2 {
		t.Errorf("limit lowered to 2 five seconds ago, still %d at once", m)
	}
	wg.Wait()
}

// TestPoolSlotOfADeletedLimitDoesNotFreeANewOne: a slot taken under a
// limit that was then deleted and set again, released late, does not
// give back a slot of the new limit.
func TestPoolSlotOfADeletedLimitDoesNotFreeANewOne(t *testing.T) {
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return p.Limited("model") })
	old := acquire(t, p, "model", "k")
	if err := st.DeleteConcurrency(ctxT(t), "model"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees it deleted", func() bool { return !p.Limited("model") })
	if _, err := st.SetConcurrency(ctxT(t), "model", 1, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the new limit", func() bool { return p.Limited("model") })
	cur := acquire(t, p, "model", "k")
	old.Release()
	if s := p.TryAcquire("model"); s != nil {
		s.Release()
		t.Error("a second slot of a limit of 1 while one is held: the old limit's slot freed the new one's")
	}
	cur.Release()
}

// TestConcurrencyLimitsAreBounded: the store keeps at most MaxLimits
// concurrency limits, as it does rates.
func TestConcurrencyLimitsAreBounded(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{MaxLimits: 2})
	for _, name := range []string{"a", "b"} {
		if _, err := st.SetConcurrency(ctxT(t), name, 1, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SetConcurrency(ctxT(t), "c", 1, "test"); !errors.Is(err, flow.ErrTooMany) {
		t.Fatalf("a third concurrency limit past MaxLimits 2: %v, want ErrTooMany", err)
	}
	if _, err := st.SetConcurrency(ctxT(t), "a", 3, "test"); err != nil {
		t.Errorf("changing one kept: %v", err)
	}
}

// TestPoolWakesWhenADeadWantersLeaseEnds: a process that wanted slots
// dies; a live pool that gave a slot back to it has a caller queued and
// no call ending. It starts the caller when the dead one's lease ends,
// not at its own next renewal (a third of its lease: 10 s here). Before,
// only the leases of holders woke it, not those of wanters.
func TestPoolWakesWhenADeadWantersLeaseEnds(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for a lease
	srv := testenv.StartNATS(t)
	live, st := pool(t, srv, 30*time.Second)
	if _, err := st.SetConcurrency(ctxT(t), "model", 2, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool sees the limit", func() bool { return live.Limited("model") })
	a := acquire(t, live, "model", "a")
	b := acquire(t, live, "model", "a")
	defer a.Release()

	nc, js := srv.Connect(t)
	dst, err := flow.NewStore(ctxT(t), js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadLease := 2 * time.Second
	dead, err := flow.NewPool(ctxT(t), dst, flow.PoolOptions{Lease: deadLease})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the dead-to-be pool sees the limit", func() bool { return dead.Limited("model") })
	if s, _ := dead.Acquire("model", flow.Queue{}, func(s *flow.Slot) {}); s != nil {
		t.Fatal("a third slot of 2")
	}
	eventually(t, "the want written", func() bool {
		s, err := st.Concurrency(ctxT(t), "model")
		return err == nil && s.Wanted > 0
	})
	nc.Close() // killed, wanting
	died := time.Now()
	dead.Close()

	// b's slot goes back to the dead wanter; the caller queued here waits
	// for the dead one's lease to end.
	got := make(chan time.Time, 1)
	if s, _ := live.Acquire("model", flow.Queue{}, func(s *flow.Slot) { got <- time.Now(); s.Release() }); s != nil {
		t.Fatal("not queued")
	}
	b.Release()
	select {
	case at := <-got:
		if waited := at.Sub(died); waited > deadLease+time.Second {
			t.Fatalf("the queued caller started %s after the wanter died; its lease was %s", waited, deadLease)
		}
		t.Logf("started %s after the wanter died (its lease %s)", at.Sub(died).Round(time.Millisecond), deadLease)
	case <-time.After(15 * time.Second):
		t.Fatal("the queued caller did not start within 15 s")
	}
}
