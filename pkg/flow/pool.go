package flow

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A Pool is one process's share of the fleet's concurrency limits: it
// hands out slots of the resources that have a limit (Store.SetConcurrency)
// and queues what it cannot start yet.
//
// A slot in hand costs nothing: the pool leases slots from the store in
// numbers and hands them to its callers without a round trip, so a limit
// that does not bind costs one write a lease period. A caller that finds
// no slot free here queues (Acquire returns a Ticket) and is called back
// when one frees; the pool asks the store for more meanwhile. Queued
// callers hold nothing, wait without polling, and are served round-robin
// between their fairness keys and in order within a key: a key with
// thousands queued does not delay a key with one.
//
// Between processes the limit is shared through the leases: a pool
// takes free slots when it has callers queued, says how many more it
// wants when none are free, and gives back what it does not use once
// another process wants some, keeping no more than its fair share
// (the limit over the processes that hold or want slots). Every pool
// watches the limits' keys, so a slot given back is taken within a round
// trip. A process that dies holds its slots until its lease runs out
// (PoolOptions.Lease).
type Pool struct {
	st    *Store
	id    string
	lease time.Duration
	onErr func(name string, err error)
	// sweepAfter is how long after the last lease of a dead key's record
	// ran out this pool purges it (a share of the lease, random per pool,
	// so that the pools do not all try at once).
	sweepAfter time.Duration

	mu sync.Mutex
	// res are the pool's views of the limits' records, by KV key:
	// "c.<name>" a resource's limit over all keys, "k.<name>.<hash>" the
	// leases of one key of a per-key limit.
	res map[string]*resource
	// totals are the records of "c.<name>" in res, by name (a resource's
	// is never forgotten: a step's lookup costs no key built).
	totals map[string]*resource
	// perKey is each resource's limit per key ("p.<name>"), by name.
	perKey map[string]int
	// gens counts the generations handed to resources (nextGen).
	gens int

	// watch is the watch of the records, and resync the KV keys its
	// first values held while it catches up after it was started again
	// (nil otherwise: see rewatch).
	watch  jetstream.KeyWatcher
	resync map[string]bool
	// beforeRewatch, when set (tests), runs before the watch is started
	// again.
	beforeRewatch func()

	nudge chan struct{}
	ready chan struct{}
	stop  context.CancelFunc
	done  chan struct{}
}

// PoolOptions configures a Pool. Zero values take the defaults documented.
type PoolOptions struct {
	// ID names the process in the leases. Default: a random one.
	ID string
	// Lease is how long slots stay the process's without a renewal: a
	// killed process's slots are free again at most this long after it
	// died. Renewed at a third of it. Default 15 s.
	Lease time.Duration
	// OnError is told of a failed write of the pool's lease (the pool
	// retries); optional.
	OnError func(name string, err error)
}

// resource is a pool's view of one record of leases: a resource's limit
// over all keys, or one key's under a per-key limit.
type resource struct {
	name string
	// kv is the record's KV key, and key the fairness key of a key's
	// record ("" for a resource's).
	kv, key string
	// rec is the newest record seen (limited false: none, unlimited).
	rec     slotRecord
	limited bool
	// held and until are the pool's lease as last written (what it wants
	// is read from the record).
	held  int
	until time.Time
	// yielded: the pool gave slots back while another wanted them, and
	// takes none while others want until another process has written
	// (the one it gave them to, taking them).
	yielded bool
	inUse   int
	queue   fairQueue
	// lastUsed: when a caller last took or gave back a slot here.
	lastUsed time.Time
	// gen is the resource's generation, new when it is made and when its
	// limit is lifted (Pool.nextGen): a slot taken before gives nothing
	// back when released.
	gen int
	// dirty: something changed since the lease was last decided; next:
	// when to decide again regardless.
	dirty bool
	next  time.Time
}

// isKey reports whether r is one key's record of a per-key limit.
func (r *resource) isKey() bool { return strings.HasPrefix(r.kv, "k.") }

// A Slot is one call's place in a concurrency limit: a slot of the
// resource's limit over all keys, of its key's limit, or both. Release
// it when the call ends; releasing twice does nothing.
type Slot struct {
	p     *Pool
	name  string
	parts parts
	// released guards against a second Release.
	released atomic.Bool
	// Waited is how long the caller queued for the slot.
	Waited time.Duration
}

// part is a slot of one record: its KV key, and the generation of the
// limit it was taken under (resource.gen).
type part struct {
	kv  string
	gen int
}

// parts are the slots a caller holds: of its key's record and of the
// resource's, at most (an array: a slot costs no allocation of its own).
type parts struct {
	a [2]part
	n int
}

func (ps *parts) add(pt part) {
	ps.a[ps.n] = pt
	ps.n++
}

func (ps *parts) list() []part { return ps.a[:ps.n] }

// Name is the resource the slot is of ("" for a slot of nobody's: the
// resource has no limit).
func (s *Slot) Name() string { return s.name }

// Release gives the slot back (to the next caller queued here, or to
// the fleet).
func (s *Slot) Release() {
	if s == nil || s.p == nil || !s.released.CompareAndSwap(false, true) {
		return
	}
	s.p.release(s.parts.list())
}

// A Ticket is a caller queued for a slot.
type Ticket struct {
	p *Pool
	w *waiter
}

// waiter is a caller queued for a slot. Under a per-key limit it takes
// its key's slot, then the resource's (stages): one holding its key's
// slot may wait for the resource's, never the other way round.
type waiter struct {
	key     string
	prio    int
	since   time.Time
	granted func(*Slot)
	name    string
	// stages are the KV keys of the records still to take a slot of, in
	// order; parts the slots taken so far; at the queue it waits in.
	stages []string
	parts  parts
	at     *resource
	gone   bool // granted or cancelled
}

// Cancel takes the caller out of the queue; false when the slot was
// granted already (the callback has the slot, and releases it). A caller
// that held its key's slot while it waited for the resource's gives it
// back, which may start another caller: its granted callback may run on
// the goroutine that cancels, as on one that releases a slot.
func (t *Ticket) Cancel() bool {
	p, w := t.p, t.w
	p.mu.Lock()
	if w.gone {
		p.mu.Unlock()
		return false
	}
	w.gone = true
	if w.at != nil {
		w.at.queue.remove(w)
		w.at.dirty = true // the lease may want less now
		w.at = nil
	}
	held := w.parts
	w.parts = parts{}
	p.mu.Unlock()
	// A key's slot taken while waiting for the resource's goes back.
	p.release(held.list())
	p.poke()
	return true
}

// NewPool starts a pool on st. It returns once it has read the limits
// stored; Close ends it.
func NewPool(ctx context.Context, st *Store, opts PoolOptions) (*Pool, error) {
	if opts.Lease == 0 {
		opts.Lease = 15 * time.Second
	}
	if opts.Lease < time.Second {
		return nil, fmt.Errorf("flow pool: lease %s is too short (min 1s)", opts.Lease)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	if opts.ID == "" {
		opts.ID = hex.EncodeToString(b)
	}
	if opts.OnError == nil {
		opts.OnError = func(string, error) {}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := st.kv.WatchFiltered(wctx, poolFilters())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("flow pool: watch concurrency limits: %w", err)
	}
	p := &Pool{st: st, id: opts.ID, lease: opts.Lease, onErr: opts.OnError,
		sweepAfter: time.Duration(binary.BigEndian.Uint64(b) % uint64(opts.Lease/3)),
		res:        map[string]*resource{}, totals: map[string]*resource{}, perKey: map[string]int{},
		nudge: make(chan struct{}, 1), ready: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	go p.run(wctx, w)
	select {
	case <-p.ready:
		return p, nil
	case <-ctx.Done():
		p.Close()
		return nil, fmt.Errorf("flow pool: read concurrency limits: %w", ctx.Err())
	}
}

// ID is the name of the pool's leases.
func (p *Pool) ID() string { return p.id }

// Limited reports whether name has a concurrency limit, over all keys or
// per key.
func (p *Pool) Limited(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.totals[name]
	return r != nil && r.limited || p.perKey[name] > 0
}

// TryAcquire takes a slot of name if one is free here now, without
// queueing: nil when none is (then Acquire queues the caller), and nil
// when name has a limit per key (Acquire with the caller's key). A name
// with no limit always has one.
func (p *Pool) TryAcquire(name string) *Slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perKey[name] > 0 {
		return nil
	}
	r := p.totals[name]
	if r == nil || !r.limited {
		return &Slot{}
	}
	now := time.Now()
	r.lastUsed = now
	if r.queue.len() == 0 && r.free(p.id, now) > 0 && !r.yields(p.id, now) {
		r.inUse++
		r.dirty = true
		s := &Slot{p: p, name: name}
		s.parts.add(part{kv: r.kv, gen: r.gen})
		return s
	}
	return nil
}

// Queue says where a caller waits while no slot is free: behind the
// callers of a higher Priority, and among those of its own round-robin
// between fairness keys (Key), in the order they came within a key.
// Under a per-key limit (Store.SetConcurrencyPerKey) Key is also whose
// slots the caller takes.
type Queue struct {
	Key      string
	Priority int
}

// Acquire takes a slot of name. It returns the slot when one is free here
// now (a name with no limit always has one). Otherwise it queues the
// caller as q says and returns a Ticket: granted is called with the slot
// once one frees, on a goroutine of the pool that it must not block.
func (p *Pool) Acquire(name string, q Queue, granted func(*Slot)) (*Slot, *Ticket) {
	p.mu.Lock()
	now := time.Now()
	w := &waiter{key: q.Key, prio: q.Priority, since: now, granted: granted, name: name, stages: p.stagesOf(name, q.Key, now)}
	if len(w.stages) == 0 {
		p.mu.Unlock()
		return &Slot{}, nil
	}
	var b batch
	s := p.advance(w, now, &b)
	p.mu.Unlock()
	p.finish(&b)
	if s != nil {
		return s, nil
	}
	return nil, &Ticket{p: p, w: w}
}

// stagesOf lists the records a caller of name and key takes a slot of
// (p.mu held): its key's under a per-key limit, then the resource's.
func (p *Pool) stagesOf(name, key string, now time.Time) []string {
	var out []string
	if per := p.perKey[name]; per > 0 {
		kv := keySlotKey(name, key)
		if p.res[kv] == nil {
			p.res[kv] = &resource{name: name, kv: kv, key: key, limited: true, lastUsed: now, gen: p.nextGen(),
				rec: slotRecord{Limit: per, name: name, kv: kv, Key: key}}
		}
		out = append(out, kv)
	}
	if r := p.totals[name]; r != nil && r.limited {
		out = append(out, r.kv)
	}
	return out
}

// batch collects what a change under p.mu lets happen once it is
// unlocked: callers to start, and whether the leases need deciding.
type batch struct {
	grants []grantTo
	poke   bool
}

// grantTo is one slot handed to a queued caller.
type grantTo struct {
	w *waiter
	s *Slot
}

// finish starts the callers b lets start and wakes the lease keeper if
// b asks (p.mu not held).
func (p *Pool) finish(b *batch) {
	for _, g := range b.grants {
		g.w.granted(g.s)
	}
	if b.poke {
		p.poke()
	}
}

// advance takes w's slots, stage by stage, while they are free here
// (p.mu held): the slot once w has all, nil when w queues at a stage.
func (p *Pool) advance(w *waiter, now time.Time, b *batch) *Slot {
	for len(w.stages) > 0 {
		r := p.res[w.stages[0]]
		if r == nil || !r.limited {
			w.stages = w.stages[1:]
			continue
		}
		r.lastUsed, r.dirty = now, true
		if r.queue.len() > 0 || r.free(p.id, now) <= 0 || r.yields(p.id, now) {
			r.queue.push(w)
			w.at, b.poke = r, true
			return nil
		}
		r.take(w)
	}
	w.gone = true
	return &Slot{p: p, name: w.name, parts: w.parts, Waited: now.Sub(w.since)}
}

// take gives w a slot of r, its stage now (p.mu held).
func (r *resource) take(w *waiter) {
	r.inUse++
	w.parts.add(part{kv: r.kv, gen: r.gen})
	w.stages = w.stages[1:]
}

// PoolStat is what a pool holds of one limit.
type PoolStat struct {
	Name string
	// Limit is the fleet's limit over all keys (0: none) and PerKey its
	// limit per key (0: none). Held is what this pool's lease of the
	// limit over all keys holds, InUse what its callers hold (of the
	// limit over all keys, or of their keys' when there is none),
	// Waiting how many of them are queued, and Keys how many keys they
	// hold or wait for under the per-key limit.
	Limit, PerKey, Held, InUse, Waiting, Keys int
}

// Stats returns what the pool holds of each limit, by name.
func (p *Pool) Stats() []PoolStat {
	p.mu.Lock()
	defer p.mu.Unlock()
	by := map[string]*PoolStat{}
	stat := func(name string) *PoolStat {
		s := by[name]
		if s == nil {
			s = &PoolStat{Name: name, PerKey: p.perKey[name]}
			by[name] = s
		}
		return s
	}
	for _, r := range p.res {
		switch {
		case !r.limited:
		case !r.isKey():
			s := stat(r.name)
			s.Limit, s.Held, s.Waiting = r.rec.Limit, r.held, s.Waiting+r.queue.len()
			s.InUse = r.inUse
		case r.inUse > 0 || r.queue.len() > 0:
			s := stat(r.name)
			s.Waiting += r.queue.len()
			s.Keys++
			if s.Limit == 0 {
				s.InUse += r.inUse
			}
		}
	}
	for name := range p.perKey {
		stat(name)
	}
	out := make([]PoolStat, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	sortStats(out)
	return out
}

// Close gives back the slots the pool holds and ends it. Callers still
// queued are not called; slots still in use are released to nobody.
func (p *Pool) Close() {
	p.stop()
	<-p.done
}

// release is a slot's Release: each part goes back to its record, the
// resource's first.
func (p *Pool) release(parts []part) {
	if len(parts) == 0 {
		return
	}
	p.mu.Lock()
	var b batch
	now := time.Now()
	for i := len(parts) - 1; i >= 0; i-- {
		r := p.res[parts[i].kv]
		if r == nil || !r.limited || r.gen != parts[i].gen {
			continue
		}
		r.inUse = max(r.inUse-1, 0)
		r.lastUsed, r.dirty = now, true
		p.fill(r, now, true, &b)
		if r.queue.len() > 0 || r.held > r.inUse && r.othersWant(p.id, now) || r.isKey() && r.inUse == 0 {
			b.poke = true
		}
	}
	p.mu.Unlock()
	p.finish(&b)
}

func (p *Pool) poke() {
	select {
	case p.nudge <- struct{}{}:
	default:
	}
}

// yields reports whether the pool should give a freed slot back rather
// than start a caller queued here: another process wants slots and this
// one holds more than its share rounded down. The remainder of the limit
// over the processes goes round: a pool above the rounded-down share
// gives a slot back each time one frees, and one at or below it may take
// up to the share rounded up (with a limit of 1 and two busy workers,
// they take turns).
func (r *resource) yields(id string, now time.Time) bool {
	_, wanting, holders := r.rec.used(id, now)
	return wanting > 0 && r.held > r.rec.Limit/(holders+1)
}

// free is how many more slots the pool may hand out now (p.mu held):
// what its lease holds, within what the limit leaves the others' leases,
// and none once its lease has run out unrenewed (another process may
// have taken its slots).
func (r *resource) free(id string, now time.Time) int {
	if !now.Before(r.until) {
		return 0
	}
	others, _, _ := r.rec.used(id, now)
	return min(r.held, r.rec.Limit-others) - r.inUse
}

func (r *resource) othersWant(id string, now time.Time) bool {
	_, wanting, _ := r.rec.used(id, now)
	return wanting > 0
}

// fill hands the slots r's lease holds and no caller uses to the callers
// queued at r (p.mu held), each going on to its next stage; slots freed
// by a caller are given back instead while the pool yields (see yields),
// slots just taken are not.
func (p *Pool) fill(r *resource, now time.Time, freed bool, b *batch) {
	for r.queue.len() > 0 && r.free(p.id, now) > 0 && !(freed && r.yields(p.id, now)) {
		w := r.queue.pop()
		w.at = nil
		r.take(w)
		if s := p.advance(w, now, b); s != nil {
			b.grants = append(b.grants, grantTo{w: w, s: s})
		}
	}
}

// unlimit lifts r's limit (p.mu held): every caller queued at it goes on
// to its next stage without a slot of r, and slots taken before give
// nothing back. A resource's record is forgotten (it was deleted); a
// key's is kept, for the pool to take its lease out of it.
func (p *Pool) unlimit(r *resource, now time.Time, b *batch) {
	for r.queue.len() > 0 {
		w := r.queue.pop()
		w.at = nil
		w.stages = w.stages[1:]
		if s := p.advance(w, now, b); s != nil {
			b.grants = append(b.grants, grantTo{w: w, s: s})
		}
	}
	r.limited, r.held, r.inUse, r.dirty = false, 0, 0, true
	if !r.isKey() {
		r.rec = slotRecord{}
	}
	r.gen = p.nextGen()
	b.poke = true
}

// nextGen is a generation no resource of the pool has had (p.mu held):
// a slot taken under a limit since lifted, or of a record forgotten and
// made again, gives nothing back when released.
func (p *Pool) nextGen() int {
	p.gens++
	return p.gens
}

// run keeps the pool's leases: it follows the records' changes, and
// writes the lease when the pool needs slots, has some to give back, or
// must renew.
func (p *Pool) run(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(p.done)
	p.setWatch(w)
	defer func() { _ = p.currentWatch().Stop() }()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			p.giveBackAll()
			return
		case e, ok := <-w.Updates():
			if !ok {
				if w = p.rewatch(ctx); w == nil {
					p.giveBackAll()
					return
				}
				continue
			}
			p.observe(e)
		case <-p.nudge:
		case <-timer.C:
		}
		next := p.reconcileAll(ctx)
		timer.Reset(time.Until(next))
	}
}

// observe takes in one change of a record from the watch (nil: the
// records stored have all been read).
func (p *Pool) observe(e jetstream.KeyValueEntry) {
	if e == nil {
		p.endResync()
		select {
		case <-p.ready:
		default:
			close(p.ready)
		}
		return
	}
	if p.resync != nil && e.Operation() == jetstream.KeyValuePut {
		p.resync[e.Key()] = true
	}
	var b batch
	p.mu.Lock()
	switch k := e.Key(); {
	case strings.HasPrefix(k, slotKey("")):
		p.observeLimit(k[len(slotKey("")):], e, &b)
	case strings.HasPrefix(k, perKeyKey("")):
		p.observePerKey(k[len(perKeyKey("")):], e, &b)
	default:
		p.observeKey(k, e, &b)
	}
	p.mu.Unlock()
	p.finish(&b)
}

// observeLimit takes in a change of name's limit over all keys (p.mu
// held).
func (p *Pool) observeLimit(name string, e jetstream.KeyValueEntry, b *batch) {
	kv := slotKey(name)
	r := p.res[kv]
	if r == nil {
		r = &resource{name: name, kv: kv, lastUsed: time.Now(), gen: p.nextGen()}
		p.res[kv] = r
		p.totals[name] = r
	}
	r.dirty = true
	if e.Operation() != jetstream.KeyValuePut {
		p.unlimit(r, time.Now(), b)
	} else if rec, err := decodeSlots(name, e); err != nil {
		p.onErr(name, err)
	} else if rec.rev > r.rec.rev || !r.limited {
		r.rec, r.limited, r.yielded = rec, true, false
		p.fill(r, time.Now(), true, b)
	}
}

// observePerKey takes in a change of name's per-key limit (p.mu held):
// every key of name takes the new limit, or none.
func (p *Pool) observePerKey(name string, e jetstream.KeyValueEntry, b *batch) {
	per := 0
	if e.Operation() == jetstream.KeyValuePut {
		rec, err := decodePerKey(name, e)
		if err != nil {
			p.onErr(name, err)
			return
		}
		per = rec.PerKey
	}
	p.setPerKey(name, per, b)
}

// setPerKey sets name's per-key limit to per (0: none) for every key of
// name (p.mu held).
func (p *Pool) setPerKey(name string, per int, b *batch) {
	if per == p.perKey[name] {
		return
	}
	if per == 0 {
		delete(p.perKey, name)
	} else {
		p.perKey[name] = per
	}
	now := time.Now()
	for _, r := range p.res {
		if !r.isKey() || r.name != name {
			continue
		}
		r.dirty = true
		if per == 0 {
			p.unlimit(r, now, b)
			continue
		}
		r.rec.Limit, r.limited, r.yielded = per, true, false
		p.fill(r, now, true, b)
	}
}

// observeKey takes in a change of one key's record (p.mu held). A purged
// record is forgotten once nothing here holds or waits for its slots.
func (p *Pool) observeKey(kv string, e jetstream.KeyValueEntry, b *batch) {
	name, ok := keyRecordName(kv)
	if !ok {
		return
	}
	r := p.res[kv]
	if e.Operation() != jetstream.KeyValuePut {
		// A marker older than the record the pool knows is of a record
		// purged before the pool created it again: the watch hands it
		// late (the pool's own writes race the watch).
		if r != nil && e.Revision() > r.rec.rev {
			r.dirty = true
			r.purged()
			if r.inUse == 0 && r.queue.len() == 0 {
				delete(p.res, kv)
			}
		}
		return
	}
	per := p.perKey[name]
	rec, err := decodeKeySlots(name, per, e)
	if err != nil {
		p.onErr(name, err)
		return
	}
	if r == nil {
		r = &resource{name: name, kv: kv, key: rec.Key, limited: per > 0, gen: p.nextGen()}
		p.res[kv] = r
	}
	r.dirty = true
	if rec.rev > r.rec.rev {
		r.rec, r.yielded = rec, false
		if r.limited {
			p.fill(r, time.Now(), true, b)
		}
	}
}

// purged takes in that r's record, a key's, is gone: no lease holds any
// of its slots, this pool's neither.
func (r *resource) purged() {
	r.rec = slotRecord{Limit: r.rec.Limit, name: r.name, kv: r.kv, Key: r.key}
	r.held, r.until = 0, time.Time{}
}
