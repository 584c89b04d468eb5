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

// reconcileAll brings every lease to what the pool needs and returns when
// to look again at the latest.
func (p *Pool) reconcileAll(ctx context.Context) time.Time {
	p.mu.Lock()
	names := make([]string, 0, len(p.res))
	for name, r := range p.res {
		if r.limited {
			names = append(names, name)
		}
	}
	p.mu.Unlock()
	next := time.Now().Add(time.Hour)
	for _, name := range names {
		if t := p.reconcile(ctx, name); t.Before(next) {
			next = t
		}
	}
	return next
}

// reconcile writes name's lease until it says what the pool needs, and
// returns when to look again.
func (p *Pool) reconcile(ctx context.Context, name string) time.Time {
	for attempt := range maxAttempts {
		p.mu.Lock()
		r := p.res[name]
		if r == nil || !r.limited {
			p.mu.Unlock()
			return time.Now().Add(time.Hour)
		}
		now := time.Now()
		d := r.decide(p.id, p.lease, now)
		if !d.write {
			p.mu.Unlock()
			if soon := now.Add(minWake); d.next.Before(soon) {
				return soon
			}
			return d.next
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
		err := p.st.putSlots(ctx, &rec)
		if err == nil {
			p.wrote(name, rec, d, until)
			continue
		}
		if ctx.Err() != nil {
			return now
		}
		if !errors.Is(err, errConflict) {
			p.onErr(name, err)
			return now.Add(time.Second)
		}
		p.refresh(ctx, name)
		if attempt > 0 {
			backOff(attempt)
		}
	}
	return time.Now().Add(minWake)
}

// wrote takes in a lease the pool wrote, and starts the callers it lets
// start.
func (p *Pool) wrote(name string, rec slotRecord, d decision, until time.Time) {
	p.mu.Lock()
	r := p.res[name]
	if r == nil || !r.limited {
		p.mu.Unlock()
		return
	}
	if rec.rev > r.rec.rev {
		r.rec = rec
	}
	r.held, r.until = d.n, until
	grants := r.fill(p, time.Now(), false)
	p.mu.Unlock()
	grant(grants)
}

// refresh reads name's record after a compare-and-set found it changed.
func (p *Pool) refresh(ctx context.Context, name string) {
	rec, err := p.st.getSlots(ctx, name)
	p.mu.Lock()
	r := p.res[name]
	var grants []grantTo
	switch {
	case r == nil:
	case errors.Is(err, ErrNotFound):
		grants = r.unlimit(time.Now())
	case err != nil:
		p.onErr(name, err)
	case rec.rev > r.rec.rev:
		r.rec = rec
	}
	p.mu.Unlock()
	grant(grants)
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
	others, wanting, holders := r.rec.used(id, now)
	limit, need := r.rec.Limit, r.queue.len()
	room := max(limit-others, 0)
	d := decision{n: r.held, next: now.Add(time.Hour)}
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
	if d.want > 0 {
		// Slots free up when others give them back (the watch says so)
		// or when a dead holder's lease runs out.
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

// firstEnd is the earliest end of another holder's lease after now.
func (r *slotRecord) firstEnd(id string, now time.Time) time.Time {
	var first time.Time
	for h, l := range r.Holders {
		if h != id && l.N > 0 && l.Until.After(now) && (first.IsZero() || l.Until.Before(first)) {
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
	var names []string
	for name, r := range p.res {
		if _, listed := r.rec.Holders[p.id]; r.limited && listed {
			names = append(names, name)
		}
	}
	p.mu.Unlock()
	for _, name := range names {
		for attempt := range maxAttempts {
			rec, err := p.st.getSlots(ctx, name)
			if err != nil {
				break
			}
			if _, listed := rec.Holders[p.id]; !listed {
				break
			}
			rec.prune(time.Now())
			delete(rec.Holders, p.id)
			if err = p.st.putSlots(ctx, &rec); !errors.Is(err, errConflict) {
				break
			}
			backOff(attempt + 1)
		}
	}
}

func sortStats(s []PoolStat) {
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
}
