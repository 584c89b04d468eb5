package flow

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Concurrency limits per key: at most N calls of a resource at once for
// each fairness key (Queue.Key: a tenant, say), beside or instead of the
// resource's limit over all keys.
//
// The setting is its own KV key, "p.<name>", apart from the resource's
// "c.<name>": a worker of the release before, which knows only "c.",
// rewrites that record with each lease and would drop a field it does
// not know. Each key's leases are a record of their own,
// "k.<name>.<hash of the key>", written only by the pools that hold or
// want slots of that key, so a key's traffic does not contend with
// another's. Such a record is created when a pool first needs a slot of
// its key and purged by the write that leaves it without a live lease,
// or, when its holders died, by another pool once their leases ran out:
// the records stored are the keys busy in the last lease, not every key
// ever seen.

// PerKeySlots is a concurrency limit per key as stored, with what the keys
// busy now hold: the per-key counterpart of Slots, the limit over all
// keys (a rate per key is a Limit, as a rate is; its BlockedUntil is
// always zero: slow-downs are of the resource).
type PerKeySlots struct {
	Name string
	// PerKey is how many calls of the resource may run at once for any
	// one key.
	PerKey int
	// Keys are the keys that hold or want slots, by key.
	Keys []KeySlots
	// SetBy and SetAt: who set the limit, and when.
	SetBy string
	SetAt time.Time
}

// KeySlots is what one key of a per-key limit holds.
type KeySlots struct {
	Key string
	// Held is how many slots the key's unexpired leases hold, Wanted what
	// those waiting for more said they waited for, and Holders how many
	// processes hold or want some.
	Held, Wanted, Holders int
}

// perKeyRecord is a per-key limit as stored, readable with
// `nats kv get durable_limits p.<name>`.
type perKeyRecord struct {
	PerKey int       `json:"per_key"`
	SetBy  string    `json:"set_by,omitempty"`
	SetAt  time.Time `json:"set_at,omitzero"`

	rev uint64
}

func perKeyKey(name string) string { return "p." + name }

// keySlotKey is the KV key of the leases of key's slots of name: the key
// is any string (a tenant's name, an email), so it is hashed into a KV
// token, and kept in the record for reading.
func keySlotKey(name, key string) string {
	h := sha256.Sum256([]byte(key))
	return "k." + name + "." + hex.EncodeToString(h[:16])
}

// keyHashLen is the length of the hash that ends a key record's KV key.
const keyHashLen = 32

// keyRecordName is the resource a key record ("k.<name>.<hash>") is of.
func keyRecordName(kvKey string) (string, bool) {
	rest, ok := strings.CutPrefix(kvKey, "k.")
	if !ok || len(rest) < keyHashLen+2 || rest[len(rest)-keyHashLen-1] != '.' {
		return "", false
	}
	return rest[:len(rest)-keyHashLen-1], true
}

func decodePerKey(name string, e jetstream.KeyValueEntry) (perKeyRecord, error) {
	var r perKeyRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return perKeyRecord{}, fmt.Errorf("decode per-key limit %s: %w", name, err)
	}
	if r.PerKey < 1 || r.PerKey > MaxConcurrency {
		return perKeyRecord{}, fmt.Errorf("decode per-key limit %s: %d out of range", name, r.PerKey)
	}
	r.rev = e.Revision()
	return r, nil
}

// decodeKeySlots reads a key record; its limit is the per-key limit
// (perKey), which is stored once in "p.<name>", not in each key's record.
func decodeKeySlots(name string, perKey int, e jetstream.KeyValueEntry) (slotRecord, error) {
	var r slotRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return slotRecord{}, fmt.Errorf("decode concurrency of a key of %s: %w", name, err)
	}
	r.Limit, r.name, r.kv, r.rev = perKey, name, e.Key(), e.Revision()
	return r, nil
}

// SetConcurrencyPerKey stores name's concurrency limit per key: at most
// perKey calls of the resource run at once for any one fairness key,
// within name's limit over all keys if it has one (SetConcurrency). A
// bad name or perKey outside [1, MaxConcurrency] is ErrBadLimit; a new
// name past StoreOptions.MaxLimits per-key limits is ErrTooMany.
//
// It needs per-message TTLs on the bucket (a NATS server 2.11 or later):
// an idle key's record is purged, and its purge marker expires.
//
// Workers of releases before per-key limits ignore them: set one once
// every worker that runs steps of name is of this release or later.
func (s *Store) SetConcurrencyPerKey(ctx context.Context, name string, perKey int, by string) (PerKeySlots, error) {
	if err := nameErr(name); err != nil {
		return PerKeySlots{}, err
	}
	if perKey < 1 || perKey > MaxConcurrency {
		return PerKeySlots{}, badLimit("concurrency per key %d: use 1 to %d calls at once", perKey, MaxConcurrency)
	}
	if !s.ttl {
		return PerKeySlots{}, fmt.Errorf("concurrency per key of %s: the bucket %s has no per-message TTLs (a NATS server before 2.11, or a bucket made without them), and each key's purge marker would stay for good: %w", name, s.bucket, ErrBadLimit)
	}
	r, err := s.getPerKey(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		if err := s.roomIn(ctx, perKeyKey(""), name); err != nil {
			return PerKeySlots{}, err
		}
	case err != nil:
		return PerKeySlots{}, err
	case r.PerKey == perKey:
		return s.ConcurrencyPerKey(ctx, name)
	}
	// One writer's setting replaces another's: the last set wins, as an
	// operator expects of `limit set`.
	data, err := json.Marshal(perKeyRecord{PerKey: perKey, SetBy: by, SetAt: s.now().UTC()})
	if err != nil {
		return PerKeySlots{}, err
	}
	if _, err := s.kv.Put(ctx, perKeyKey(name), data); err != nil {
		return PerKeySlots{}, fmt.Errorf("store per-key limit %s: %w", name, err)
	}
	return s.ConcurrencyPerKey(ctx, name)
}

// ConcurrencyPerKey returns name's per-key limit with the keys busy now
// (ErrNotFound when it has none).
func (s *Store) ConcurrencyPerKey(ctx context.Context, name string) (PerKeySlots, error) {
	if err := nameErr(name); err != nil {
		return PerKeySlots{}, err
	}
	r, err := s.getPerKey(ctx, name)
	if err != nil {
		return PerKeySlots{}, err
	}
	l := PerKeySlots{Name: name, PerKey: r.PerKey, SetBy: r.SetBy, SetAt: r.SetAt}
	now := s.now()
	err = s.scanKeys(ctx, "k."+name+".*", false, func(e jetstream.KeyValueEntry) error {
		rec, err := decodeKeySlots(name, r.PerKey, e)
		if err != nil {
			return err
		}
		if sl := rec.slots(now); sl.Holders > 0 {
			l.Keys = append(l.Keys, KeySlots{Key: rec.Key, Held: sl.Held, Wanted: sl.Wanted, Holders: sl.Holders})
		}
		return nil
	})
	if err != nil {
		return PerKeySlots{}, fmt.Errorf("read the keys of %s: %w", name, err)
	}
	sort.Slice(l.Keys, func(i, j int) bool { return l.Keys[i].Key < l.Keys[j].Key })
	return l, nil
}

// ConcurrencyPerKeyList returns every per-key limit, by name, without
// their keys (ConcurrencyPerKey reads those of one).
func (s *Store) ConcurrencyPerKeyList(ctx context.Context) ([]PerKeySlots, error) {
	return listOf(ctx, s, perKeyKey(""), "per-key limits", func(name string, e jetstream.KeyValueEntry) (PerKeySlots, error) {
		r, err := decodePerKey(name, e)
		return PerKeySlots{Name: name, PerKey: r.PerKey, SetBy: r.SetBy, SetAt: r.SetAt}, err
	}, func(l PerKeySlots) string { return l.Name })
}

// DeleteConcurrencyPerKey removes name's per-key limit (ErrNotFound when
// none): its keys run unlimited from then on, within name's limit over
// all keys if it has one. The keys' leases are given back by their
// pools and purged.
func (s *Store) DeleteConcurrencyPerKey(ctx context.Context, name string) error {
	return s.deleteKey(ctx, name, perKeyKey(name), "per-key limit "+name)
}

func (s *Store) getPerKey(ctx context.Context, name string) (perKeyRecord, error) {
	e, err := s.entry(ctx, perKeyKey(name), "per-key limit "+name)
	if err != nil {
		return perKeyRecord{}, err
	}
	return decodePerKey(name, e)
}

// putLease stores a pool's change of r's leases compare-and-set on its
// revision. A key's record left without a live lease is purged instead:
// the key is idle, and its record goes until the key is busy again.
func (s *Store) putLease(ctx context.Context, r *slotRecord, now time.Time) error {
	r.prune(now)
	if r.kv == "" || len(r.Holders) > 0 {
		return s.putSlots(ctx, r)
	}
	return s.purgeKeyRecord(ctx, r)
}

// purgeKeyRecord purges r, a key record with no live lease, if it is
// still at r.rev (errConflict when not).
func (s *Store) purgeKeyRecord(ctx context.Context, r *slotRecord) error {
	if r.rev == 0 {
		return nil
	}
	opts := []jetstream.KVDeleteOpt{jetstream.LastRevision(r.rev)}
	if s.ttl {
		opts = append(opts, jetstream.PurgeTTL(time.Minute))
	}
	err := s.kv.Purge(ctx, r.kvKey(), opts...)
	if isConflict(err) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("purge the idle key record %s: %w", r.kvKey(), err)
	}
	r.rev = 0
	return nil
}
