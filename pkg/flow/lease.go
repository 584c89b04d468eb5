package flow

import (
	"context"
	"errors"
	"maps"
	"sort"
	"time"
)

// How a pool keeps its leases (see Pool): one goroutine decides, for each
// limit, what the lease should be now, and writes it compare-and-set when
// that differs from what it wrote, or when the lease needs renewing.

// minWake bounds how soon the pool looks again after a write failed or
// while it waits for leases of others to run out.
const minWake = 10 * time.Millisecond

// reconcileAll brings every lease that changed, or is due, to what the
// pool needs, purges the records of dead keys, and returns when to look
// again at the latest.
func (p *Pool) reconcileAll(ctx context.Context) time.Time {
	now := time.Now()
	p.mu.Lock()
	var kvs []string
	for kv, r := range p.res {
		if r.dirty || !now.Before(r.next) {
			kvs = append(kvs, kv)
		}
	}
	p.mu.Unlock()
	for _, kv := range kvs {
		p.reconcile(ctx, kv)
	}
	next := now.Add(time.Hour)
	p.mu.Lock()
	for kv, r := range p.res {
		if r.isKey() && r.rec.rev == 0 && r.inUse == 0 && r.queue.len() == 0 && r.held == 0 {
			delete(p.res, kv) // nothing stored, nothing here: forgotten
			continue
		}
		if r.next.Before(next) {
			next = r.next
		}
	}
	p.mu.Unlock()
	return next
}

// reconcile writes kv's lease until it says what the pool needs, and
// sets when to look again.
func (p *Pool) reconcile(ctx context.Context, kv string) {
	for attempt := range maxAttempts {
		p.mu.Lock()
		r := p.res[kv]
		if r == nil {
			p.mu.Unlock()
			return
		}
		now := time.Now()
		r.dirty = false
		d := r.decide(p.id, p.lease, now)
		if !d.write {
			r.next = d.next
			if soon := now.Add(minWake); r.next.Before(soon) {
				r.next = soon
			}
			sweep := false
			if r.isKey() && r.rec.rev > 0 {
				// Once every lease has run out, the record is a dead key's.
				if at := r.rec.lastEnd().Add(p.sweepAfter); now.Before(at) {
					if at.Before(r.next) {
						r.next = at
					}
				} else {
					sweep = true
				}
			}
			rec := r.rec.clone()
			p.mu.Unlock()
			if sweep {
				p.sweep(ctx, rec)
			}
			return
		}
		// Slots given back are no longer handed out from here on, even
		// if the write fails: holding more in the store than in use
		// costs nobody much, and the next write mends it. Given back to
		// another that wants them, they are not taken again before it
		// has written (see resource.yielded).
		if d.n < r.held && r.othersWant(p.id, now) {
			r.yielded = true
		}
		r.held = min(r.held, d.n)
		rec := r.rec.clone()
		p.mu.Unlock()

		rec.prune(now)
		until := now.Add(p.lease)
		if d.n == 0 && d.want == 0 {
			delete(rec.Holders, p.id)
			until = time.Time{}
		} else {
			rec.Holders[p.id] = lease{N: d.n, Want: d.want, Until: until}
		}
		err := p.st.putLease(ctx, &rec, now)
		if err == nil {
			if p.resync != nil {
				// Written while a new watch catches up: the watch may hand
				// it after its end-of-initial-values marker, and endResync
				// must not take it for deleted.
				p.resync[kv] = true
			}
			p.wrote(kv, rec, d, until)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, errConflict) {
			p.onErr(rec.name, err)
			p.later(kv, now.Add(time.Second))
			return
		}
		p.refresh(ctx, kv)
		if attempt > 0 {
			backOff(attempt)
		}
	}
	p.later(kv, time.Now().Add(minWake))
}

// later sets when kv's lease is decided again.
func (p *Pool) later(kv string, at time.Time) {
	p.mu.Lock()
	if r := p.res[kv]; r != nil {
		r.next = at
	}
	p.mu.Unlock()
}

// sweep purges rec, a key's record whose leases all ran out a while ago
// (their processes died): the key is idle. Another pool may be first, or
// the key busy again; either way the compare-and-set refuses, and the
// watch tells.
func (p *Pool) sweep(ctx context.Context, rec slotRecord) {
	if err := p.st.purgeKeyRecord(ctx, &rec); err != nil && !errors.Is(err, errConflict) && ctx.Err() == nil {
		p.onErr(rec.name, err)
	}
}

// wrote takes in a lease the pool wrote, and starts the callers it lets
// start.
func (p *Pool) wrote(kv string, rec slotRecord, d decision, until time.Time) {
	var b batch
	p.mu.Lock()
	r := p.res[kv]
	if r == nil || !r.limited && !r.isKey() {
		p.mu.Unlock()
		return
	}
	switch {
	case rec.rev > r.rec.rev:
		r.rec = rec
	case rec.rev == 0 && r.isKey():
		r.purged() // the write purged it: nobody holds its slots
	}
	r.held, r.until = d.n, until
	if r.limited {
		p.fill(r, time.Now(), false, &b)
	}
	p.mu.Unlock()
	p.finish(&b)
}

// refresh reads kv's record after a compare-and-set found it changed.
func (p *Pool) refresh(ctx context.Context, kv string) {
	p.mu.Lock()
	r := p.res[kv]
	if r == nil {
		p.mu.Unlock()
		return
	}
	name, per, isKey := r.name, r.rec.Limit, r.isKey()
	p.mu.Unlock()
	rec, err := p.st.leases(ctx, kv, name, isKey, per)
	var b batch
	p.mu.Lock()
	r = p.res[kv]
	switch {
	case r == nil:
	case errors.Is(err, ErrNotFound) && isKey:
		r.purged()
	case errors.Is(err, ErrNotFound):
		p.unlimit(r, time.Now(), &b)
	case err != nil:
		p.onErr(name, err)
	case rec.rev > r.rec.rev:
		r.rec = rec
	}
	p.mu.Unlock()
	p.finish(&b)
}

// decision is what a pool's lease of one limit should be now.
type decision struct {
	n, want int
	write   bool
	next    time.Time
}

// decide says what the lease should hold and want (p.mu held): the slots
// in use, plus those that callers queued here can take while the limit
// has room, plus idle ones kept for up to a lease while nobody else wants
// them (a limit that does not bind costs a write a lease period, not a
// write a call). While others want slots, the pool gives back what no
// caller of its uses, and keeps its share (see yields). What no caller
// uses is never kept beyond the limit (a limit lowered binds as the
// calls end).
//
// How many callers wait here is written when it goes from none to some
// or back: the other pools only ask whether someone wants.
func (r *resource) decide(id string, leaseFor time.Duration, now time.Time) decision {
	if !r.limited {
		// The limit is lifted: a lease left in a key's record goes.
		_, listed := r.rec.Holders[id]
		return decision{write: listed && r.rec.rev > 0, next: now.Add(time.Hour)}
	}
	others, wanting, holders := r.rec.used(id, now)
	limit, need := r.rec.Limit, r.queue.len()
	room := max(limit-others, 0)
	// The lease covers the calls running here, whatever the pool last
	// held (a record purged or swept under a running call is made again).
	d := decision{n: max(r.held, r.inUse), next: now.Add(time.Hour)}
	switch {
	case wanting > 0:
		keep := (limit + holders) / (holders + 1) // the share rounded up
		switch {
		case need == 0:
			keep = 0
		case r.yields(id, now):
			keep = limit / (holders + 1)
		}
		d.n = max(r.inUse, min(d.n, keep))
		if need > 0 && !r.yields(id, now) && !r.yielded {
			take := min(need, max(min(room, keep)-d.n, 0))
			d.n += take
			need -= take
		}
	case need > 0:
		// With nobody else wanting, take as many again as held: a pool
		// whose load grows takes its slots in a few writes, not one per
		// caller that finds none free.
		take := min(need, max(room-d.n, 0))
		d.n += min(need+max(d.n, need), max(room-d.n, 0))
		need -= take
	}
	d.n = min(d.n, max(r.inUse, room))
	d.want = need
	d.next = r.idle(leaseFor, now, &d)
	holding := d.n > 0 || d.want > 0
	renewAt := r.until.Add(-leaseFor * 2 / 3)
	// Against the record, not what the pool last meant to write: a write
	// that lost its compare-and-set is made again.
	cur, listed := r.rec.Holders[id]
	d.write = d.n != cur.N || (d.want > 0) != (cur.Want > 0) || holding && !now.Before(renewAt) || !holding && listed
	if holding && renewAt.Before(d.next) {
		d.next = renewAt
	}
	if d.want > 0 || wanting > 0 {
		// Slots free up when others give them back (the watch says so)
		// or when a dead holder's lease runs out; the pool stops yielding
		// when a dead wanter's does.
		if end := r.rec.firstEnd(id, now); !end.IsZero() && end.Before(d.next) {
			d.next = end
		}
	}
	return d
}

// idle gives back the slots of a limit the pool has not used for a
// lease (p.mu held) and returns when to look again for that.
func (r *resource) idle(leaseFor time.Duration, now time.Time, d *decision) time.Time {
	if r.inUse > 0 || r.queue.len() > 0 {
		return d.next
	}
	if end := r.lastUsed.Add(leaseFor); now.Before(end) {
		return end
	}
	d.n = 0
	return d.next
}

// lastEnd is when the last of r's leases runs out.
func (r *slotRecord) lastEnd() time.Time {
	var last time.Time
	for _, l := range r.Holders {
		if l.Until.After(last) {
			last = l.Until
		}
	}
	return last
}

// firstEnd is the earliest end after now of another's lease that holds
// or wants slots.
func (r *slotRecord) firstEnd(id string, now time.Time) time.Time {
	var first time.Time
	for h, l := range r.Holders {
		if h != id && (l.N > 0 || l.Want > 0) && l.Until.After(now) && (first.IsZero() || l.Until.Before(first)) {
			first = l.Until
		}
	}
	return first
}

func (r slotRecord) clone() slotRecord {
	r.Holders = maps.Clone(r.Holders)
	if r.Holders == nil {
		r.Holders = map[string]lease{}
	}
	return r
}

// giveBackAll removes the pool's leases as it closes.
func (p *Pool) giveBackAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.mu.Lock()
	var mine []*resource
	for _, r := range p.res {
		if _, listed := r.rec.Holders[p.id]; listed {
			mine = append(mine, r)
		}
	}
	p.mu.Unlock()
	for _, r := range mine {
		for attempt := range maxAttempts {
			rec, err := p.st.leases(ctx, r.kv, r.name, r.isKey(), 0)
			if err != nil {
				break
			}
			if _, listed := rec.Holders[p.id]; !listed {
				break
			}
			delete(rec.Holders, p.id)
			if err = p.st.putLease(ctx, &rec, time.Now()); !errors.Is(err, errConflict) {
				break
			}
			backOff(attempt + 1)
		}
	}
}

func sortStats(s []PoolStat) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}
