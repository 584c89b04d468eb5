package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Rates per key: N per period with a burst for each key of a resource (a
// tenant, say), beside the resource's own rate or alone.
//
// The setting is its own KV key, "q.<name>", apart from the resource's
// "l.<name>": a worker of the release before rewrites that record with
// every token it takes and would drop a field it does not know. Each
// key's tokens are a record "t.<name>.<hash of the key>" holding GCRA's
// theoretical arrival time, written with a TTL that ends when the key's
// burst is full again: from then on the record says nothing a missing
// one does not, so the server drops it. The records stored are the keys
// that took a token within one burst's refill, never every key seen.

// keyTokens is one key's tokens as stored, readable with
// `nats kv get durable_limits t.<name>.<hash>`.
type keyTokens struct {
	TAT time.Time `json:"tat"`
	Key string    `json:"key"`
}

func ratePerKeyKey(name string) string { return "q." + name }

// keyTokensKey is the KV key of key's tokens of name (the key hashed into
// a KV token, as keySlotKey does).
func keyTokensKey(name, key string) string {
	return "t" + keySlotKey(name, key)[1:]
}

// SetRatePerKey stores name's rate per key: each key of name takes its
// own tokens at rate, within name's own rate if it has one (Set). Setting
// the rate a name has changes nothing; a changed rate applies from each
// key's next token. A bad name or rate is ErrBadLimit; a new name past
// StoreOptions.MaxLimits rates per key ErrTooMany. It needs per-message
// TTLs on the bucket (a NATS server 2.11 or later): the keys' records
// expire with them.
//
// Workers of releases before rates per key ignore them: set one once
// every worker that calls name is of this release or later.
func (s *Store) SetRatePerKey(ctx context.Context, name string, rate Rate, by string) (Limit, error) {
	if err := nameErr(name); err != nil {
		return Limit{}, err
	}
	if err := rate.Validate(); err != nil {
		return Limit{}, fmt.Errorf("rate per key of %s: %w", name, err)
	}
	if !s.ttl {
		return Limit{}, fmt.Errorf("rate per key of %s: the bucket %s has no per-message TTLs (a NATS server before 2.11, or a bucket made without them), and the keys' records would never go: %w", name, s.bucket, ErrBadLimit)
	}
	r, err := s.getRatePerKey(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		if err := s.roomIn(ctx, ratePerKeyKey(""), name); err != nil {
			return Limit{}, err
		}
	case err != nil:
		return Limit{}, err
	case r.rate == rate:
		return r.limit(), nil
	}
	r = record{name: name}
	r.rate, r.setBy, r.setAt = rate, by, s.now().UTC()
	data, err := r.encode()
	if err != nil {
		return Limit{}, err
	}
	if _, err := s.kv.Put(ctx, ratePerKeyKey(name), data); err != nil {
		return Limit{}, fmt.Errorf("store rate per key of %s: %w", name, err)
	}
	return r.limit(), nil
}

// RatePerKey returns name's rate per key (ErrNotFound when none).
func (s *Store) RatePerKey(ctx context.Context, name string) (Limit, error) {
	if err := nameErr(name); err != nil {
		return Limit{}, err
	}
	r, err := s.getRatePerKey(ctx, name)
	return r.limit(), err
}

// RatePerKeyList returns every rate per key, by name.
func (s *Store) RatePerKeyList(ctx context.Context) ([]Limit, error) {
	return listOf(ctx, s, ratePerKeyKey(""), "rates per key", func(name string, e jetstream.KeyValueEntry) (Limit, error) {
		r, err := decode(name, e)
		return r.limit(), err
	}, func(l Limit) string { return l.Name })
}

// DeleteRatePerKey removes name's rate per key (ErrNotFound when none).
// The keys' records go with their TTLs.
func (s *Store) DeleteRatePerKey(ctx context.Context, name string) error {
	return s.deleteKey(ctx, name, ratePerKeyKey(name), "rate per key of "+name)
}

func (s *Store) getRatePerKey(ctx context.Context, name string) (record, error) {
	e, err := s.entry(ctx, ratePerKeyKey(name), "rate per key of "+name)
	if err != nil {
		return record{}, err
	}
	r, err := decode(name, e)
	if err == nil && r.rate.N == 0 {
		err = fmt.Errorf("decode rate per key of %s: no rate", name)
	}
	return r, err
}

// TakeKey is Take for a caller of key: it takes a token of name's rate
// (if name has one) and, if name has a rate per key (SetRatePerKey), one
// of key's. A wait above 0 means neither was taken (but for a race with
// another taker of the same key, which may cost name a token): ask again
// after wait. A name with neither answers 0.
func (s *Store) TakeKey(ctx context.Context, name, key string, now time.Time) (time.Duration, error) {
	if err := nameErr(name); err != nil {
		return 0, err
	}
	r, err := s.getRatePerKey(ctx, name)
	if errors.Is(err, ErrNotFound) {
		wait, _, err := s.take(ctx, name, now)
		return wait, err
	}
	if err != nil {
		return 0, fmt.Errorf("take %s: %w", name, err)
	}
	return s.takeKey(ctx, name, key, r.rate, now)
}

// takeKey takes a token of name's rate and one of key's at perKey. It
// looks at the key's tokens and then the resource's, taking neither while
// either would wait; then takes the key's (compare-and-set: a caller that
// loses it to another of the same key looks again, and finds the key's
// wait), then the resource's. Only when another key's caller takes the
// resource's last token between the look and the take is the key's token
// given back: the shared resource is never spent by a key's refused
// callers, and a key only for a moment by the resource's.
func (s *Store) takeKey(ctx context.Context, name, key string, perKey Rate, now time.Time) (time.Duration, error) {
	kk := keyTokensKey(name, key)
	for attempt := range maxAttempts {
		if attempt > 0 {
			backOff(attempt)
		}
		cur, rev, err := s.readKeyTokens(ctx, kk)
		if err != nil {
			return 0, err
		}
		tat, wait := gcra(perKey, cur.TAT, now)
		if wait > 0 {
			return wait, nil
		}
		if wait, err := s.peek(ctx, name, now); err != nil || wait > 0 {
			return wait, err
		}
		err = s.putKeyTokens(ctx, kk, keyTokens{TAT: tat, Key: key}, rev, now)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		wait, _, err = s.take(ctx, name, now)
		if err != nil || wait > 0 {
			s.giveBackKey(ctx, kk, perKey, now)
			return wait, err
		}
		return 0, nil
	}
	return contendedWait(), nil
}

// giveBackKey gives back a token of a key taken for a call the
// resource then refused (best effort: a lost race leaves the key one
// token short, not the resource).
func (s *Store) giveBackKey(ctx context.Context, kk string, perKey Rate, now time.Time) {
	for attempt := range 4 {
		if attempt > 0 {
			backOff(attempt)
		}
		cur, rev, err := s.readKeyTokens(ctx, kk)
		if err != nil || rev == 0 {
			return
		}
		cur.TAT = cur.TAT.Add(-perKey.interval())
		if err := s.putKeyTokens(ctx, kk, cur, rev, now); !errors.Is(err, errConflict) {
			return
		}
	}
}

// ratesPerKeyTolerant reads every rate per key, by name, skipping the
// records it cannot read (a later release's format, a hand edit): one
// bad record must not stop every take of the fleet.
func (s *Store) ratesPerKeyTolerant(ctx context.Context) (map[string]Rate, error) {
	out := map[string]Rate{}
	err := s.scanKeys(ctx, ratePerKeyKey(">"), false, func(e jetstream.KeyValueEntry) error {
		name := e.Key()[len(ratePerKeyKey("")):]
		if r, err := decode(name, e); err == nil && r.rate.N > 0 {
			out[name] = r.rate
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list rates per key: %w", err)
	}
	return out, nil
}

// readKeyTokens reads a key's tokens and their revision (zero values
// when the key has no record: a full burst).
func (s *Store) readKeyTokens(ctx context.Context, kk string) (keyTokens, uint64, error) {
	e, err := s.kv.Get(ctx, kk)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return keyTokens{}, 0, nil
	}
	if err != nil {
		return keyTokens{}, 0, fmt.Errorf("read %s: %w", kk, err)
	}
	var t keyTokens
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return keyTokens{}, 0, fmt.Errorf("decode %s: %w", kk, err)
	}
	return t, e.Revision(), nil
}

// putKeyTokens stores a key's tokens compare-and-set on rev (creating
// them when rev is 0), to expire once the key's burst is full again:
// GCRA's arrival time passed, plus two seconds (a caller's clock a little
// behind the server's still finds the record), in whole seconds.
func (s *Store) putKeyTokens(ctx context.Context, kk string, t keyTokens, rev uint64, now time.Time) error {
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	ttl := (max(t.TAT.Sub(now), 0) + 3*time.Second - 1).Truncate(time.Second)
	if rev == 0 {
		_, err = s.kv.Create(ctx, kk, data, jetstream.KeyTTL(ttl))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return errConflict
		}
	} else {
		_, err = s.js.Publish(ctx, "$KV."+s.bucket+"."+kk, data,
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	}
	if isConflict(err) {
		return errConflict
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", kk, err)
	}
	return nil
}
