package flow

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SetLinger sets how long a record holding a slow-down only outlives its
// block, so that a test sees it go in seconds.
func (s *Store) SetLinger(d time.Duration) { s.linger = d }

// SetClock sets the clock of s's Set, so that a test's limits are set in
// the time its takes are given.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// QueueOrder pushes waiters of the keys given, in order, into a fair
// queue, removes those listed in remove (by their index in keys), and
// returns the keys in the order the queue serves them. A key "k@p" has
// priority p.
func QueueOrder(keys []string, remove []int) []string {
	var q fairQueue
	ws := make([]*waiter, len(keys))
	for i, k := range keys {
		ws[i] = &waiter{key: k}
		if name, prio, ok := strings.Cut(k, "@"); ok {
			ws[i].prio, _ = strconv.Atoi(prio)
			ws[i].key = name
		}
		q.push(ws[i])
	}
	for _, i := range remove {
		q.remove(ws[i])
	}
	var out []string
	for q.len() > 0 {
		w := q.pop()
		if w.prio != 0 {
			out = append(out, fmt.Sprintf("%s@%d", w.key, w.prio))
			continue
		}
		out = append(out, w.key)
	}
	return out
}

// EndWatch ends the pool's watch of the limits, as a closed subscription
// does; before is run before the pool watches again.
func (p *Pool) EndWatch(before func()) {
	p.mu.Lock()
	p.beforeRewatch = before
	w := p.watch
	p.mu.Unlock()
	_ = w.Stop()
}

// KeySlotKey is the KV key of key's leases of name.
func KeySlotKey(name, key string) string { return keySlotKey(name, key) }

// Observe hands the pool an entry as its watch would.
func (p *Pool) Observe(e jetstream.KeyValueEntry) { p.observe(e) }

// ManualPool is a pool whose run loop the test drives by hand.
func ManualPool(st *Store, id string, lease time.Duration) *Pool {
	return &Pool{st: st, id: id, lease: lease, onErr: func(string, error) {},
		sweepAfter: lease / 6, res: map[string]*resource{}, totals: map[string]*resource{}, perKey: map[string]int{},
		nudge: make(chan struct{}, 1), ready: make(chan struct{}), done: make(chan struct{})}
}

func (p *Pool) BeginResync()                     { p.resync = map[string]bool{} }
func (p *Pool) ReconcileAll(ctx context.Context) { p.reconcileAll(ctx) }
func (p *Pool) Held(kv string) (held, inUse int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.res[kv]; r != nil {
		return r.held, r.inUse
	}
	return -1, -1
}
