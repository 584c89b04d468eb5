package flow

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Take takes one token of limit name at now, the caller's clock (keep
// the fleet's clocks in sync: a clock d ahead takes tokens up to d early).
// A wait of 0 means a token was taken; a wait above 0 means none was:
// ask again after wait. A name with no limit set answers 0 and writes
// nothing, unless a slow-down holds it (see SlowDown).
//
// A token taken costs a read and a compare-and-set; a refusal, or a name
// with no limit, one read. A worker calling Take for every model call
// should go through a Limiter, which answers for names with no limit
// without a round trip.
//
// When another taker wins the compare-and-set, Take pauses a fraction of
// a millisecond and tries again; after 16 lost in a row (a limit busier
// than one KV key serves) it answers a wait of 5-10ms, having taken
// nothing.
func (s *Store) Take(ctx context.Context, name string, now time.Time) (wait time.Duration, err error) {
	if err := nameErr(name); err != nil {
		return 0, err
	}
	wait, _, err = s.take(ctx, name, now)
	return wait, err
}

// take is Take, saying too whether name is stored.
func (s *Store) take(ctx context.Context, name string, now time.Time) (wait time.Duration, stored bool, err error) {
	for attempt := range maxAttempts {
		if attempt > 0 {
			backOff(attempt)
		}
		r, err := s.get(ctx, name)
		if errors.Is(err, ErrNotFound) {
			return 0, false, nil
		}
		if err != nil {
			return 0, true, fmt.Errorf("take %s: %w", name, err)
		}
		tat, wait := r.next(now)
		if wait > 0 || r.rate.N == 0 {
			return wait, true, nil
		}
		r.tat = tat
		err = s.put(ctx, &r, 0)
		if errors.Is(err, errConflict) {
			continue
		}
		if err != nil {
			return 0, true, fmt.Errorf("take %s: %w", name, err)
		}
		return 0, true, nil
	}
	return contendedWait(), true, nil
}

// next is the arrival time after a token taken at now, and the wait
// before one may be (0: now), the slow-down's included. A record of a
// slow-down only has no tokens to take: its wait is the slow-down's.
func (r *record) next(now time.Time) (time.Time, time.Duration) {
	blocked := max(r.blockedUntil.Sub(now), 0)
	if r.rate.N == 0 {
		return r.tat, blocked
	}
	tat, wait := gcra(r.rate, r.tat, now)
	return tat, max(blocked, wait)
}

// peek is the wait before a token of name may be taken at now, taking
// nothing (0 for a name with no record).
func (s *Store) peek(ctx context.Context, name string, now time.Time) (time.Duration, error) {
	r, err := s.get(ctx, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("take %s: %w", name, err)
	}
	_, wait := r.next(now)
	return wait, nil
}

// backOff pauses before another attempt after attempt lost a
// compare-and-set: a random 0-100µs per attempt lost, so that the losers
// do not all come back at once (BenchmarkTake, 8 takers of one key on
// 2 CPUs: 1,900 tokens a second without it, 2,300-3,700 with, and 5-15
// times fewer contended answers).
func backOff(attempt int) {
	time.Sleep(rand.N(time.Duration(attempt) * 100 * time.Microsecond))
}

// contendedWait is the wait after losing maxAttempts compare-and-sets in
// a row: 5-10 ms, jittered so that the losers do not come back together.
func contendedWait() time.Duration {
	return 5*time.Millisecond + rand.N(5*time.Millisecond)
}

// SlowDown blocks limit name until until, fleet-wide: every Take before
// it answers the wait that is left. Of two slow-downs the later end wins;
// an earlier one changes nothing. When the block ends the limit resumes
// at its steady pace, without a burst (the provider has just said it was
// overloaded).
//
// A name with no limit set is blocked too, so that the fleet backs off a
// provider it was not told to limit: its record holds the block only,
// counts toward StoreOptions.MaxLimits (ErrTooMany past it), and goes a
// minute after the block ends (on a server that has per-message TTLs,
// 2.11 and later; before, it stays until Delete).
//
// Losing 16 compare-and-sets in a row to other writers is an error
// wrapping jetstream.ErrKeyRevisionMismatch.
func (s *Store) SlowDown(ctx context.Context, name string, until time.Time) error {
	if err := nameErr(name); err != nil {
		return err
	}
	if until.IsZero() {
		return badLimit("slow down %s: no end time", name)
	}
	until = until.UTC()
	for attempt := range maxAttempts {
		if attempt > 0 {
			backOff(attempt)
		}
		r, err := s.get(ctx, name)
		switch {
		case errors.Is(err, ErrNotFound):
			if err := s.room(ctx, name); err != nil {
				return err
			}
			r = record{name: name, blockedUntil: until}
			err = s.create(ctx, &r, s.blockTTL(until))
		case err != nil:
			return err
		case !until.After(r.blockedUntil):
			return nil
		case r.rate.N == 0:
			r.blockedUntil = until
			err = s.put(ctx, &r, s.blockTTL(until))
		default:
			r.blockedUntil = until
			if t := resumeTAT(r.rate, until); t.After(r.tat) {
				r.tat = t
			}
			err = s.put(ctx, &r, 0)
		}
		if !errors.Is(err, errConflict) {
			return err
		}
	}
	return contended("slow down", name)
}

// blockTTL is the life of a record that holds a slow-down only: until
// its end and linger more, in whole seconds (the server's unit); 0 when
// the bucket has no TTLs.
func (s *Store) blockTTL(until time.Time) time.Duration {
	if !s.ttl {
		return 0
	}
	return (max(time.Until(until), 0) + s.linger + time.Second - 1).Truncate(time.Second)
}
