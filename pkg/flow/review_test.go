package flow_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// Found by the review of the per-key limits (each failed before its fix).

type fakeEntry struct {
	key string
	rev uint64
	op  jetstream.KeyValueOp
}

func (f fakeEntry) Bucket() string                  { return "durable_limits" }
func (f fakeEntry) Key() string                     { return f.key }
func (f fakeEntry) Value() []byte                   { return nil }
func (f fakeEntry) Revision() uint64                { return f.rev }
func (f fakeEntry) Created() time.Time              { return time.Now() }
func (f fakeEntry) Delta() uint64                   { return 0 }
func (f fakeEntry) Operation() jetstream.KeyValueOp { return f.op }

// The purge marker of a key's record, delivered by the watch after the
// pool has created the record again (its own idle purge, then a new
// caller of the key), must not make the pool drop the lease its running
// caller holds.
func TestStalePurgeMarkerDropsALiveLease(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	a, st := pool(t, srv, time.Second)
	b, _ := pool(t, srv, time.Second)
	js := jsOf(t, srv)
	setPerKey(t, st, "model", 1)
	eventually(t, "limited", func() bool { return a.Limited("model") && b.Limited("model") })
	acquire(t, a, "model", "K").Release()
	eventually(t, "idle record purged", func() bool { return len(keyRecords(t, js)) == 0 })
	kv := flow.KeySlotKey("model", "K")
	var purgeRev uint64
	{
		kvs, _ := js.KeyValue(ctxT(t), "durable_limits")
		h, _ := kvs.History(ctxT(t), kv)
		for _, e := range h {
			if e.Operation() != jetstream.KeyValuePut {
				purgeRev = e.Revision()
			}
		}
	}
	held := acquire(t, a, "model", "K")
	defer held.Release()
	eventually(t, "A's lease stored", func() bool {
		l, err := st.ConcurrencyPerKey(ctxT(t), "model")
		return err == nil && len(l.Keys) == 1 && l.Keys[0].Held == 1
	})
	// The watch hands A the purge marker of before, late.
	a.Observe(fakeEntry{key: kv, rev: purgeRev, op: jetstream.KeyValuePurge})
	// A's caller still runs: its lease must stay renewed.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) && len(keyRecords(t, js)) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
	got := make(chan *flow.Slot, 1)
	s, _ := b.Acquire("model", flow.Queue{Key: "K"}, func(s *flow.Slot) { got <- s })
	if s == nil {
		select {
		case s = <-got:
		case <-time.After(5 * time.Second):
		}
	}
	if s != nil {
		h, u := a.Held(kv)
		t.Errorf("limit 1 per key: pool B got key K's slot while pool A's caller holds it (A: held %d, in use %d)", h, u)
		s.Release()
	}
}

// A record the pool creates while its new watch hands the records stored
// (after a rewatch) comes after the watch's end-of-initial-values marker
// (nats.go sends it after the count pending at the consumer's creation):
// endResync must not take it for deleted.
func TestRecordCreatedDuringResyncTakenForDeleted(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	setPerKey(t, st, "model", 1)
	kvs, err := js.KeyValue(ctxT(t), "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	pe, err := kvs.Get(ctxT(t), "p.model")
	if err != nil {
		t.Fatal(err)
	}
	p := flow.ManualPool(st, "A", 15*time.Second)
	p.Observe(pe)
	p.Observe(nil)
	// The watch ended and was started again: its initial values begin.
	p.BeginResync()
	p.Observe(pe)
	got := make(chan *flow.Slot, 1)
	if s, _ := p.Acquire("model", flow.Queue{Key: "K"}, func(s *flow.Slot) { got <- s }); s != nil {
		t.Fatal("not queued")
	}
	p.ReconcileAll(ctxT(t)) // run loop after an initial value: creates K's record
	var held *flow.Slot
	select {
	case held = <-got:
	default:
		t.Fatal("not granted after the create")
	}
	defer held.Release()
	p.Observe(nil) // end of the initial values
	kv := flow.KeySlotKey("model", "K")
	ke, err := kvs.Get(ctxT(t), kv)
	if err != nil {
		t.Fatal(err)
	}
	p.Observe(ke) // the create, delivered after the marker
	p.ReconcileAll(ctxT(t))
	h, u := p.Held(kv)
	recs := keyRecords(t, js)
	if len(recs) == 0 || h < u {
		t.Errorf("a caller holds key K's slot but the pool holds %d (in use %d) and the store %d key records: another pool may take K's slot", h, u, len(recs))
	}
}

// A slot taken before its per-key limit was deleted, released after the
// limit was set again (and the pool forgot the key's record), must not
// give back a slot of the new limit.
func TestOldSlotReleasedAfterPerKeyLimitReset(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	p, st := pool(t, srv, 0)
	js := jsOf(t, srv)
	setPerKey(t, st, "model", 1)
	eventually(t, "limited", func() bool { return p.Limited("model") })
	old := acquire(t, p, "model", "a")
	if err := st.DeleteConcurrencyPerKey(ctxT(t), "model"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "unlimited", func() bool { return !p.Limited("model") })
	eventually(t, "record purged", func() bool { return len(keyRecords(t, js)) == 0 })
	time.Sleep(300 * time.Millisecond) // the pool forgets the key's resource
	setPerKey(t, st, "model", 1)
	eventually(t, "limited again", func() bool { return p.Limited("model") })
	s1 := acquire(t, p, "model", "a")
	second := make(chan *flow.Slot, 1)
	if s, _ := p.Acquire("model", flow.Queue{Key: "a"}, func(s *flow.Slot) { second <- s }); s != nil {
		t.Fatal("second caller of key a not queued under limit 1")
	}
	old.Release() // the call that began before the delete ends
	select {
	case s := <-second:
		t.Errorf("limit 1 per key: a second caller of key a started while the first holds its slot (the old slot's release freed the new limit's)")
		s.Release()
	case <-time.After(1 * time.Second):
	}
	s1.Release()
}

// Ten callers of one key wake together for the key's next token (they
// were all told the same wait). One gets it; the others should spend
// nothing of the resource's rate, shared by every key.
func TestLosersOfAKeySpendTheResourcesTokens(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{})
	st.SetClock(func() time.Time { return t0 })
	set(t, st, "model", flow.Rate{N: 10, Per: time.Hour, Burst: 10})
	setPerKeyRate(t, st, "model", flow.Rate{N: 1, Per: time.Second, Burst: 1})
	if w, err := st.TakeKey(ctxT(t), "model", "a", at(0)); err != nil || w != 0 {
		t.Fatal(w, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 10 {
		wg.Go(func() {
			w, err := st.TakeKey(ctxT(t), "model", "a", at(time.Second))
			if err == nil && w == 0 {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	left := 0
	for {
		w, err := st.Take(ctxT(t), "model", at(time.Second))
		if err != nil || w > 0 {
			break
		}
		left++
	}
	t.Logf("key a: %d of 10 got a token; the resource has %d of 10 left", granted, left)
	if want := 10 - 1 - granted; left < want {
		t.Errorf("the resource (10, shared by every key) has %d tokens left; key a made %d calls, so %d should be: %d spent by a's losers", left, 1+granted, want, want-left)
	}
}

// One rate-per-key record the Limiter cannot read (a later release's
// format, a hand edit) should not stop the takes of every other name.
func TestOneBadRatePerKeyRecordStopsEveryTake(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	set(t, st, "model", flow.Rate{N: 10, Per: time.Second, Burst: 10})
	kv, err := js.KeyValue(ctxT(t), "durable_limits")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctxT(t), "q.other", []byte(`{"n":5,"per":"1s","burst":0}`)); err != nil {
		t.Fatal(err)
	}
	lim := flow.NewLimiter(st, flow.LimiterOptions{})
	for _, name := range []string{"model", "unlimited"} {
		if _, err := lim.Take(ctxT(t), name, time.Now()); err != nil {
			t.Errorf("Take of %s: %v", name, err)
		}
	}
}

// A bucket made without message TTLs (a server before 2.11 made it, and
// it keeps its config) would keep each idle key's purge marker for good:
// a limit per key, which purges a record per idle key, is refused there,
// as a rate per key is.
func TestPerKeyLimitsRefuseABucketWithoutTTLs(t *testing.T) {
	t.Parallel() // servers of its own; mostly waiting for leases and TTLs
	srv := testenv.StartNATS(t)
	js := jsOf(t, srv)
	if _, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: "durable_limits", History: 1}); err != nil {
		t.Fatal(err)
	}
	st, _ := newStore(t, srv, flow.StoreOptions{})
	if _, err := st.SetConcurrencyPerKey(ctxT(t), "model", 1, "t"); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("SetConcurrencyPerKey on a bucket without TTLs: %v; want ErrBadLimit", err)
	}
	if _, err := st.SetRatePerKey(ctxT(t), "model", flow.Rate{N: 1, Per: time.Second, Burst: 1}, "t"); !errors.Is(err, flow.ErrBadLimit) {
		t.Errorf("SetRatePerKey on a bucket without TTLs: %v; want ErrBadLimit", err)
	}
}
