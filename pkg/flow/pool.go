package flow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

	mu  sync.Mutex
	res map[string]*resource

	nudge chan struct{}
	ready chan struct{}
	stop  context.CancelFunc
	done  chan struct{}
	err   error
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

// resource is a pool's view of one concurrency limit.
type resource struct {
	name string
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
	// gen counts the times the limit was deleted: a slot taken before
	// gives nothing back when released.
	gen int
}

// A Slot is one call's place in a concurrency limit. Release it when the
// call ends; releasing twice does nothing.
type Slot struct {
	p    *Pool
	name string
	// gen is the limit's generation it was taken under (resource.gen).
	gen      int
	released atomic.Bool
	// Waited is how long the caller queued for the slot.
	Waited time.Duration
}

// Name is the resource the slot is of ("" for a slot of nobody's: the
// resource has no limit).
func (s *Slot) Name() string { return s.name }

// Release gives the slot back (to the next caller queued here, or to
// the fleet).
func (s *Slot) Release() {
	if s == nil || s.p == nil || !s.released.CompareAndSwap(false, true) {
		return
	}
	s.p.release(s.name, s.gen)
}

// A Ticket is a caller queued for a slot.
type Ticket struct {
	p    *Pool
	name string
	w    *waiter
}

type waiter struct {
	key     string
	prio    int
	since   time.Time
	granted func(*Slot)
	gone    bool // granted or cancelled
}

// Cancel takes the caller out of the queue; false when the slot was
// granted already (the callback has the slot, and releases it).
func (t *Ticket) Cancel() bool {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if t.w.gone {
		return false
	}
	t.w.gone = true
	if r := t.p.res[t.name]; r != nil {
		r.queue.remove(t.w)
	}
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
	if opts.ID == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		opts.ID = hex.EncodeToString(b)
	}
	if opts.OnError == nil {
		opts.OnError = func(string, error) {}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := st.kv.Watch(wctx, slotKey(">"))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("flow pool: watch concurrency limits: %w", err)
	}
	p := &Pool{st: st, id: opts.ID, lease: opts.Lease, onErr: opts.OnError, res: map[string]*resource{},
		nudge: make(chan struct{}, 1), ready: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	go p.run(wctx, w)
	select {
	case <-p.ready:
		return p, nil
	case <-ctx.Done():
		p.Close()
		return nil, fmt.Errorf("flow pool: read concurrency limits: %w", ctx.Err())
	case <-p.done:
		return nil, fmt.Errorf("flow pool: read concurrency limits: %w", p.err)
	}
}

// ID is the name of the pool's leases.
func (p *Pool) ID() string { return p.id }

// Limited reports whether name has a concurrency limit.
func (p *Pool) Limited(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.res[name]
	return r != nil && r.limited
}

// TryAcquire takes a slot of name if one is free here now, without
// queueing: nil when none is (then Acquire queues the caller). A name
// with no limit always has one.
func (p *Pool) TryAcquire(name string) *Slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.res[name]
	if r == nil || !r.limited {
		return &Slot{}
	}
	now := time.Now()
	r.lastUsed = now
	if r.queue.len() == 0 && r.free(p.id, now) > 0 && !r.yields(p.id, now) {
		r.inUse++
		return &Slot{p: p, name: name, gen: r.gen}
	}
	return nil
}

// Queue says where a caller waits while no slot is free: behind the
// callers of a higher Priority, and among those of its own round-robin
// between fairness keys (Key), in the order they came within a key.
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
	r := p.res[name]
	if r == nil || !r.limited {
		p.mu.Unlock()
		return &Slot{}, nil
	}
	now := time.Now()
	r.lastUsed = now
	if r.queue.len() == 0 && r.free(p.id, now) > 0 && !r.yields(p.id, now) {
		r.inUse++
		p.mu.Unlock()
		return &Slot{p: p, name: name, gen: r.gen}, nil
	}
	w := &waiter{key: q.Key, prio: q.Priority, since: now, granted: granted}
	r.queue.push(w)
	p.mu.Unlock()
	p.poke()
	return nil, &Ticket{p: p, name: name, w: w}
}

// PoolStat is what a pool holds of one limit.
type PoolStat struct {
	Name string
	// Limit is the fleet's limit; Held what this pool's lease holds, InUse
	// what its callers hold and Waiting how many of them are queued.
	Limit, Held, InUse, Waiting int
}

// Stats returns what the pool holds of each limit, by name.
func (p *Pool) Stats() []PoolStat {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PoolStat, 0, len(p.res))
	for _, r := range p.res {
		if r.limited {
			out = append(out, PoolStat{Name: r.name, Limit: r.rec.Limit, Held: r.held, InUse: r.inUse, Waiting: r.queue.len()})
		}
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

// release is a slot's Release.
func (p *Pool) release(name string, gen int) {
	p.mu.Lock()
	r := p.res[name]
	if r == nil || !r.limited || r.gen != gen {
		p.mu.Unlock()
		return
	}
	r.inUse = max(r.inUse-1, 0)
	r.lastUsed = time.Now()
	grants := r.fill(p, r.lastUsed, true)
	poke := r.queue.len() > 0 || r.held > r.inUse && r.othersWant(p.id, time.Now())
	p.mu.Unlock()
	grant(grants)
	if poke {
		p.poke()
	}
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

// grant is one slot handed to a queued caller.
type grantTo struct {
	w *waiter
	s *Slot
}

// fill hands the slots the lease holds and no caller uses to the
// callers queued (p.mu held); slots freed by a caller are given back
// instead while the pool yields (see yields), slots just taken are not.
func (r *resource) fill(p *Pool, now time.Time, freed bool) []grantTo {
	var out []grantTo
	for r.queue.len() > 0 && r.free(p.id, now) > 0 && !(freed && r.yields(p.id, now)) {
		w := r.queue.pop()
		w.gone = true
		r.inUse++
		out = append(out, grantTo{w: w, s: &Slot{p: p, name: r.name, gen: r.gen, Waited: now.Sub(w.since)}})
	}
	return out
}

// unlimit hands every queued caller a slot of nobody's (p.mu held): the
// limit is gone.
func (r *resource) unlimit(now time.Time) []grantTo {
	var out []grantTo
	for r.queue.len() > 0 {
		w := r.queue.pop()
		w.gone = true
		out = append(out, grantTo{w: w, s: &Slot{name: r.name, Waited: now.Sub(w.since)}})
	}
	r.limited, r.held, r.inUse, r.rec = false, 0, 0, slotRecord{}
	r.gen++ // slots taken before are nobody's now
	return out
}

func grant(gs []grantTo) {
	for _, g := range gs {
		g.w.granted(g.s)
	}
}

var errPoolWatch = errors.New("the watch of the concurrency limits ended")

// run keeps the pool's leases: it follows the records' changes, and
// writes the lease when the pool needs slots, has some to give back, or
// must renew.
func (p *Pool) run(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(p.done)
	defer func() { _ = w.Stop() }()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			p.giveBackAll()
			return
		case e, ok := <-w.Updates():
			if !ok {
				p.err = errPoolWatch
				return
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
		select {
		case <-p.ready:
		default:
			close(p.ready)
		}
		return
	}
	name := e.Key()[len(slotKey("")):]
	p.mu.Lock()
	r := p.res[name]
	if r == nil {
		r = &resource{name: name, lastUsed: time.Now()}
		p.res[name] = r
	}
	var grants []grantTo
	if e.Operation() != jetstream.KeyValuePut {
		grants = r.unlimit(time.Now())
	} else if rec, err := decodeSlots(name, e); err != nil {
		p.onErr(name, err)
	} else if rec.rev > r.rec.rev || !r.limited {
		r.rec, r.limited, r.yielded = rec, true, false
		grants = r.fill(p, time.Now(), true)
	}
	p.mu.Unlock()
	grant(grants)
}
