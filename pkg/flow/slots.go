package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Concurrency limits: how many calls of a resource run at once across the
// fleet. Each is one KV key, "c.<name>", beside the rate's "l.<name>" (a
// rate's key changes with every token, a concurrency key only when slots
// move between processes, so they do not contend). Its record is the
// limit and a lease per process that holds slots or waits for some: how
// many it holds, how many more it wants, and until when. A process
// renews its lease while it holds or wants slots; one that was killed
// holds nothing once its lease has run out. The holders are the
// processes of the fleet (a Pool each), so the record stays small: an
// expired lease is dropped by the next write.

// MaxConcurrency is the largest concurrency limit.
const MaxConcurrency = 1_000_000

// Slots is a concurrency limit as stored, with what its holders hold.
type Slots struct {
	Name string
	// Limit is how many calls of the resource may run at once.
	Limit int
	// Held is how many slots unexpired leases hold, and Holders how many
	// processes hold or want some. Wanted is what those waiting for more
	// said they waited for when they began to: a sign that the limit
	// binds, not a count of the steps waiting now (a process writes its
	// lease when it starts or stops waiting, not at each step it queues;
	// the workers' metrics count those).
	Held, Wanted, Holders int
	// SetBy and SetAt: who set the limit, and when.
	SetBy string
	SetAt time.Time
}

// lease is one process's part of a concurrency limit.
type lease struct {
	N     int       `json:"n,omitempty"`
	Want  int       `json:"want,omitempty"`
	Until time.Time `json:"until"`
}

// slotRecord is a concurrency limit as stored, readable with
// `nats kv get durable_limits c.<name>`.
type slotRecord struct {
	Limit   int              `json:"limit"`
	SetBy   string           `json:"set_by,omitempty"`
	SetAt   time.Time        `json:"set_at,omitzero"`
	Holders map[string]lease `json:"holders,omitempty"`
	// Key is the fairness key a key record ("k.<name>.<hash>") is of; ""
	// in a resource's record.
	Key string `json:"key,omitempty"`

	name string
	// kv is the record's KV key when it is a key's ("" for "c.<name>").
	kv  string
	rev uint64
}

func slotKey(name string) string { return "c." + name }

// kvKey is the KV key r is stored under.
func (r *slotRecord) kvKey() string {
	if r.kv != "" {
		return r.kv
	}
	return slotKey(r.name)
}

func decodeSlots(name string, e jetstream.KeyValueEntry) (slotRecord, error) {
	var r slotRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return slotRecord{}, fmt.Errorf("decode concurrency limit %s: %w", name, err)
	}
	if r.Limit < 1 || r.Limit > MaxConcurrency {
		return slotRecord{}, fmt.Errorf("decode concurrency limit %s: limit %d out of range", name, r.Limit)
	}
	r.name, r.rev = name, e.Revision()
	return r, nil
}

// active is the holders whose leases run at now, dropping the others.
func (r *slotRecord) prune(now time.Time) {
	for id, l := range r.Holders {
		if !l.Until.After(now) {
			delete(r.Holders, id)
		}
	}
}

// used is what the leases other than id's hold at now.
func (r *slotRecord) used(id string, now time.Time) (held, wanting, holders int) {
	for h, l := range r.Holders {
		if h == id || !l.Until.After(now) {
			continue
		}
		held += l.N
		if l.Want > 0 {
			wanting++
		}
		if l.N > 0 || l.Want > 0 {
			holders++
		}
	}
	return held, wanting, holders
}

func (r *slotRecord) slots(now time.Time) Slots {
	s := Slots{Name: r.name, Limit: r.Limit, SetBy: r.SetBy, SetAt: r.SetAt}
	for _, l := range r.Holders {
		if l.Until.After(now) {
			s.Held += l.N
			s.Wanted += l.Want
			s.Holders++
		}
	}
	return s
}

// SetConcurrency stores name's concurrency limit, recording by as who set
// it. A lower limit binds as the calls holding slots end. A bad name or a
// limit outside [1, MaxConcurrency] is ErrBadLimit; a new name past
// StoreOptions.MaxLimits concurrency limits is ErrTooMany.
func (s *Store) SetConcurrency(ctx context.Context, name string, limit int, by string) (Slots, error) {
	if err := nameErr(name); err != nil {
		return Slots{}, err
	}
	if limit < 1 || limit > MaxConcurrency {
		return Slots{}, badLimit("concurrency %d: use 1 to %d calls at once", limit, MaxConcurrency)
	}
	for attempt := range maxAttempts {
		if attempt > 0 {
			backOff(attempt)
		}
		r, err := s.getSlots(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			if err := s.roomIn(ctx, slotKey(""), name); err != nil {
				return Slots{}, err
			}
			r = slotRecord{name: name}
		case err != nil:
			return Slots{}, err
		case r.Limit == limit:
			return r.slots(s.now()), nil
		}
		r.Limit, r.SetBy, r.SetAt = limit, by, s.now().UTC()
		r.prune(s.now())
		if err = s.putSlots(ctx, &r); err == nil {
			return r.slots(s.now()), nil
		}
		if !errors.Is(err, errConflict) {
			return Slots{}, err
		}
	}
	return Slots{}, contended("set concurrency", name)
}

// Concurrency returns name's concurrency limit (ErrNotFound when none).
func (s *Store) Concurrency(ctx context.Context, name string) (Slots, error) {
	if err := nameErr(name); err != nil {
		return Slots{}, err
	}
	r, err := s.getSlots(ctx, name)
	if err != nil {
		return Slots{}, err
	}
	return r.slots(s.now()), nil
}

// ConcurrencyList returns every concurrency limit, by name.
func (s *Store) ConcurrencyList(ctx context.Context) ([]Slots, error) {
	now := s.now()
	return listOf(ctx, s, slotKey(""), "concurrency limits", func(name string, e jetstream.KeyValueEntry) (Slots, error) {
		r, err := decodeSlots(name, e)
		return r.slots(now), err
	}, func(l Slots) string { return l.Name })
}

// listOf reads every record under prefix, decoded by dec, sorted by the
// name nameOf gives.
func listOf[T any](ctx context.Context, s *Store, prefix, what string, dec func(name string, e jetstream.KeyValueEntry) (T, error), nameOf func(T) string) ([]T, error) {
	var out []T
	err := s.scanKeys(ctx, prefix+">", false, func(e jetstream.KeyValueEntry) error {
		v, err := dec(e.Key()[len(prefix):], e)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	sort.Slice(out, func(i, j int) bool { return nameOf(out[i]) < nameOf(out[j]) })
	return out, nil
}

// deleteKey purges name's record k (ErrNotFound, naming what, when there
// is none).
func (s *Store) deleteKey(ctx context.Context, name, k, what string) error {
	if err := nameErr(name); err != nil {
		return err
	}
	if _, err := s.entry(ctx, k, what); err != nil {
		return err
	}
	return s.purge(ctx, k, what)
}

// DeleteConcurrency removes name's concurrency limit (ErrNotFound when
// none): its calls run unlimited from then on, and the processes waiting
// for its slots start them.
func (s *Store) DeleteConcurrency(ctx context.Context, name string) error {
	return s.deleteKey(ctx, name, slotKey(name), "concurrency limit "+name)
}

// leases reads the record of leases at KV key kv, of name: a key's
// record (isKey, whose limit is perKey) or the resource's.
func (s *Store) leases(ctx context.Context, kv, name string, isKey bool, perKey int) (slotRecord, error) {
	e, err := s.entry(ctx, kv, "concurrency limit "+name)
	switch {
	case err != nil:
		return slotRecord{}, err
	case isKey:
		return decodeKeySlots(name, perKey, e)
	}
	return decodeSlots(name, e)
}

func (s *Store) getSlots(ctx context.Context, name string) (slotRecord, error) {
	e, err := s.entry(ctx, slotKey(name), "concurrency limit "+name)
	if err != nil {
		return slotRecord{}, err
	}
	return decodeSlots(name, e)
}

// putSlots stores r compare-and-set on its revision (creating it when
// the revision is 0); errConflict when another writer was first.
func (s *Store) putSlots(ctx context.Context, r *slotRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var rev uint64
	if r.rev == 0 {
		rev, err = s.kv.Create(ctx, r.kvKey(), data)
	} else {
		rev, err = s.kv.Update(ctx, r.kvKey(), data, r.rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isConflict(err) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("store concurrency limit %s: %w", r.kvKey(), err)
	}
	r.rev = rev
	return nil
}

// scanKeys hands fn the newest entry of every key matching pattern,
// without values when metaOnly.
func (s *Store) scanKeys(ctx context.Context, pattern string, metaOnly bool, fn func(jetstream.KeyValueEntry) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, storeTimeout)
		defer cancel()
	}
	opts := []jetstream.WatchOpt{jetstream.IgnoreDeletes()}
	if metaOnly {
		opts = append(opts, jetstream.MetaOnly())
	}
	w, err := s.kv.Watch(ctx, pattern, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return nil
			}
			if err := fn(e); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
