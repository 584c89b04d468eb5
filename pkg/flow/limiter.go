package flow

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// LimiterOptions configures a Limiter. Zero values take the defaults documented.
type LimiterOptions struct {
	// Refresh is how often the Limiter reads which names the store holds
	// (their keys, not their values). A limit set or deleted, or a name
	// with no limit that another process slowed down, reaches this
	// Limiter within Refresh. Default 5s.
	Refresh time.Duration
}

// Limiter is a Store for the callers of Take, one per process: it keeps
// the names the store holds, read every LimiterOptions.Refresh, and
// answers Take for any other name without a round trip. A name it holds
// costs what Store.Take costs. It is safe for concurrent use.
type Limiter struct {
	store   *Store
	refresh time.Duration
	// loading: one refresh at a time.
	loading sync.Mutex

	mu    sync.Mutex
	names map[string]bool
	// perKey: the rates per key (SetRatePerKey), by name.
	perKey map[string]Rate
	loaded time.Time // zero: never
	// learned: the names this Limiter slowed down during a refresh, which
	// its scan may have missed.
	learned map[string]bool
}

// NewLimiter returns a Limiter over s. It reads nothing until the first
// Take.
func NewLimiter(s *Store, opts LimiterOptions) *Limiter {
	if opts.Refresh <= 0 {
		opts.Refresh = 5 * time.Second
	}
	return &Limiter{store: s, refresh: opts.Refresh, names: map[string]bool{}}
}

// Take is Store.Take, without a round trip for a name the store did not
// hold at the last refresh (wait 0, nothing taken).
func (l *Limiter) Take(ctx context.Context, name string, now time.Time) (wait time.Duration, err error) {
	if err := nameErr(name); err != nil {
		return 0, err
	}
	held, _, err := l.holds(ctx, name)
	if err != nil || !held {
		return 0, err
	}
	return l.take(ctx, name, now)
}

// take is Take of a name held at the last refresh.
func (l *Limiter) take(ctx context.Context, name string, now time.Time) (time.Duration, error) {
	wait, stored, err := l.store.take(ctx, name, now)
	if err == nil && !stored {
		l.mu.Lock()
		delete(l.names, name)
		l.mu.Unlock()
	}
	return wait, err
}

// TakeKey is Store.TakeKey with the rates per key read at the last
// refresh: for a name with no rate per key it is Take (key unused).
func (l *Limiter) TakeKey(ctx context.Context, name, key string, now time.Time) (time.Duration, error) {
	if err := nameErr(name); err != nil {
		return 0, err
	}
	held, perKey, err := l.holds(ctx, name)
	switch {
	case err != nil:
		return 0, err
	case perKey.N > 0:
		return l.store.takeKey(ctx, name, key, perKey, now)
	case !held:
		return 0, nil
	}
	return l.take(ctx, name, now)
}

// HasRatePerKey reports whether name had a rate per key at the last
// refresh, so that a caller works out its key for TakeKey only then.
func (l *Limiter) HasRatePerKey(ctx context.Context, name string) (bool, error) {
	if err := nameErr(name); err != nil {
		return false, err
	}
	_, perKey, err := l.holds(ctx, name)
	return perKey.N > 0, err
}

// SlowDown is Store.SlowDown; this Limiter's next Take of name sees it at
// once, others' within their Refresh when name had no record before.
func (l *Limiter) SlowDown(ctx context.Context, name string, until time.Time) error {
	if err := l.store.SlowDown(ctx, name, until); err != nil {
		return err
	}
	l.mu.Lock()
	l.names[name] = true
	if l.learned != nil {
		l.learned[name] = true
	}
	l.mu.Unlock()
	return nil
}

// SlowDownOn slows name down from now when callErr is a rate-limit answer
// (see RetryAfter), and returns the wait it set: 0 for any other error
// (or nil), which changes nothing. Call it with what a model or tool call
// of resource name returned.
func (l *Limiter) SlowDownOn(ctx context.Context, name string, callErr error, now time.Time) (time.Duration, error) {
	d, ok := RetryAfter(callErr)
	if !ok {
		return 0, nil
	}
	if err := l.SlowDown(ctx, name, now.Add(d)); err != nil {
		return 0, err
	}
	return d, nil
}

// holds reports whether name was held at the last refresh, and its rate
// per key then (zero: none), refreshing first when that is older than
// l.refresh. While one caller refreshes, the others go on with the names
// read before (or, before the first refresh, wait for it).
func (l *Limiter) holds(ctx context.Context, name string) (bool, Rate, error) {
	l.mu.Lock()
	held, perKey, loaded := l.names[name], l.perKey[name], l.loaded
	l.mu.Unlock()
	if !loaded.IsZero() && time.Since(loaded) < l.refresh {
		return held, perKey, nil
	}
	if !l.loading.TryLock() {
		if !loaded.IsZero() {
			return held, perKey, nil
		}
		l.loading.Lock()
	}
	defer l.loading.Unlock()
	l.mu.Lock()
	if !l.loaded.Equal(loaded) { // another caller refreshed meanwhile
		held, perKey = l.names[name], l.perKey[name]
		l.mu.Unlock()
		return held, perKey, nil
	}
	l.learned = map[string]bool{}
	l.mu.Unlock()
	names, err := l.store.names(ctx, key(""))
	var rates map[string]Rate
	if err == nil {
		rates, err = l.store.ratesPerKeyTolerant(ctx)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for n := range l.learned {
		names[n] = true
	}
	l.learned = nil
	if err != nil {
		return false, Rate{}, fmt.Errorf("take %s: read the limits' names: %w", name, err)
	}
	l.names, l.perKey, l.loaded = names, rates, time.Now()
	return names[name], rates[name], nil
}
