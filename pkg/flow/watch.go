package flow

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// poolFilters are the records a pool follows: the limits over all keys,
// the per-key limits, and the keys' leases. A new slice each time:
// WatchFiltered rewrites the one it is given into subjects.
func poolFilters() []string { return []string{slotKey(">"), perKeyKey(">"), "k.>"} }

// maxRewatchWait bounds the pause between two attempts to watch again.
const maxRewatchWait = 10 * time.Second

func (p *Pool) setWatch(w jetstream.KeyWatcher) {
	p.mu.Lock()
	p.watch = w
	p.mu.Unlock()
}

func (p *Pool) currentWatch() jetstream.KeyWatcher {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watch
}

// rewatch starts the watch again after it ended (nats.go ends it when
// its subscription closes), retrying until ctx ends (then nil). The new
// watch hands every record stored first; until it has, the pool notes
// which it saw, and once it has, endResync takes the records it did not
// see for deleted while no watch ran.
func (p *Pool) rewatch(ctx context.Context) jetstream.KeyWatcher {
	p.mu.Lock()
	before := p.beforeRewatch
	p.mu.Unlock()
	if before != nil {
		before()
	}
	wait := 100 * time.Millisecond
	for {
		w, err := p.st.kv.WatchFiltered(ctx, poolFilters())
		if err == nil {
			p.setWatch(w)
			p.resync = map[string]bool{}
			return w
		}
		if ctx.Err() != nil {
			return nil
		}
		p.onErr("", fmt.Errorf("the watch of the concurrency limits ended; watching again in %s: %w", wait, err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(wait*2, maxRewatchWait)
	}
}

// endResync takes in that a new watch has handed every record stored:
// those the pool knew and the watch did not hand were deleted while no
// watch ran.
func (p *Pool) endResync() {
	seen := p.resync
	if seen == nil {
		return
	}
	p.resync = nil
	var b batch
	now := time.Now()
	p.mu.Lock()
	for kv, r := range p.res {
		switch {
		case seen[kv]:
		case !r.isKey():
			if r.limited {
				p.unlimit(r, now, &b)
			}
		default:
			r.dirty = true
			r.purged()
			if r.inUse == 0 && r.queue.len() == 0 {
				delete(p.res, kv)
			}
		}
	}
	for name := range p.perKey {
		if !seen[perKeyKey(name)] {
			p.setPerKey(name, 0, &b)
		}
	}
	p.mu.Unlock()
	p.finish(&b)
}
