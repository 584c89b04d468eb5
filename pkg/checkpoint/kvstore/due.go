package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// dueEntry is the value of due.<R>, times in unix milliseconds. LeaseUntil
// is zero until a claim; the entry is claimable once both times are past.
type dueEntry struct {
	At         int64 `json:"at"`
	LeaseUntil int64 `json:"lease_until"`
}

func (e dueEntry) claimableAt() int64 { return max(e.At, e.LeaseUntil) }

// IndexDue puts id in the deadline index at at (millisecond resolution),
// replacing an earlier entry and any lease on it. A plain put: unlike
// checkpoint keys, due keys are meant to be written again after a delete.
func (s *Store) IndexDue(ctx context.Context, id string, at time.Time) error {
	if err := readID(id); err != nil {
		return fmt.Errorf("index due: %w", err)
	}
	value, err := marshal(dueEntry{At: at.UnixMilli()})
	if err != nil {
		return fmt.Errorf("index due %s: %w", id, err)
	}
	if _, err := s.kv.Put(ctx, dueKey(id), value); err != nil {
		return fmt.Errorf("index due %s: %w", id, err)
	}
	return nil
}

// UnindexDue removes id from the deadline index; an absent id is no error.
func (s *Store) UnindexDue(ctx context.Context, id string) error {
	if err := readID(id); err != nil {
		return fmt.Errorf("unindex due: %w", err)
	}
	err := s.kv.Delete(ctx, dueKey(id))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("unindex due %s: %w", id, err)
	}
	return nil
}

// ClaimDue reads every entry of the index with one watcher, picks those due
// and not leased at now, and claims them earliest first, each by a
// compare-and-set of its lease on the revision it read. A lost
// compare-and-set means another scheduler claimed (or re-indexed, or
// removed) the entry since: it is skipped. Every sweep reads the whole
// index, which is one entry per parked run (plus a delete marker per
// removed one until the bucket drops it): fine for thousands of entries.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := checkClaim(limit, lease); err != nil {
		return nil, fmt.Errorf("claim due: %w", err)
	}
	nowMS := now.UnixMilli()
	type candidate struct {
		id    string
		entry dueEntry
		rev   uint64
	}
	var due []candidate
	err := s.scan(ctx, "due.*", func(e jetstream.KeyValueEntry) error {
		var entry dueEntry
		if err := unmarshal(e.Value(), &entry); err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		if entry.claimableAt() <= nowMS {
			due = append(due, candidate{id: strings.TrimPrefix(e.Key(), "due."), entry: entry, rev: e.Revision()})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim due: %w", err)
	}
	// In the order the entries became claimable, as the Redis store's
	// scores give: a lapsed lease counts from its end.
	sort.Slice(due, func(i, j int) bool {
		ti, tj := due[i].entry.claimableAt(), due[j].entry.claimableAt()
		if ti != tj {
			return ti < tj
		}
		return due[i].id < due[j].id
	})
	leaseUntil := now.Add(lease).UnixMilli()
	var claimed []string
	for _, c := range due {
		if len(claimed) == limit {
			break
		}
		c.entry.LeaseUntil = leaseUntil
		value, err := marshal(c.entry)
		if err != nil {
			return claimed, fmt.Errorf("claim due %s: %w", c.id, err)
		}
		_, err = s.kv.Update(ctx, dueKey(c.id), value, c.rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			// The ids claimed so far are the caller's: their leases run.
			return claimed, fmt.Errorf("claim due %s: %w", c.id, err)
		}
		claimed = append(claimed, c.id)
	}
	return claimed, nil
}

// finishParallel bounds the entries FinishDue finishes at once.
const finishParallel = 64

// FinishDue moves or removes each entry of done that still holds the
// lease that ended at leaseUntil (see checkpoint.Store). A bucket has no
// batch write: the entries are finished concurrently, each by its own
// compare-and-set, so a sweep's batch costs a few round trips, not one
// per run. The errors of the entries that failed are joined.
func (s *Store) FinishDue(ctx context.Context, leaseUntil time.Time, done ...checkpoint.DueNext) error {
	for _, d := range done {
		if err := readID(d.ID); err != nil {
			return fmt.Errorf("finish due: %w", err)
		}
	}
	errs := make([]error, len(done))
	slots := make(chan struct{}, finishParallel)
	var wg sync.WaitGroup
	for i, d := range done {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			errs[i] = s.finishDue(ctx, d.ID, leaseUntil, d.Next)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// finishDue moves or removes id's entry if it still holds the lease that
// ended at leaseUntil: a compare-and-set (or a delete) on the revision
// read, so a write in between wins. IndexDue writes no lease, so a lease
// tells the claim's entry from a later one.
//
// The read is s.get, a leader read on a replicated bucket: the claim was
// written a moment ago, and a follower answering a direct get (as
// jetstream.KeyValue.Get sends) may not have it yet. The entry it returns
// then holds no lease, the finish leaves it, and the claim's lease brings
// it back: a wait expired twice.
func (s *Store) finishDue(ctx context.Context, id string, leaseUntil, next time.Time) error {
	e, err := s.get(ctx, dueKey(id))
	if err != nil {
		return fmt.Errorf("finish due %s: %w", id, err)
	}
	if !e.found {
		return nil
	}
	var entry dueEntry
	if err := unmarshal(e.value, &entry); err != nil {
		return fmt.Errorf("finish due %s: %w", id, err)
	}
	if entry.LeaseUntil != leaseUntil.UnixMilli() {
		return nil
	}
	if next.IsZero() {
		err = s.kv.Delete(ctx, dueKey(id), jetstream.LastRevision(e.rev))
	} else {
		var value []byte
		if value, err = marshal(dueEntry{At: next.UnixMilli()}); err == nil {
			_, err = s.kv.Update(ctx, dueKey(id), value, e.rev)
		}
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil // written since: that writer's entry stands
	}
	if err != nil {
		return fmt.Errorf("finish due %s: %w", id, err)
	}
	return nil
}

// checkClaim refuses a claim that could never hide anything.
func checkClaim(limit int, lease time.Duration) error {
	if limit < 1 {
		return fmt.Errorf("limit %d: claim at least one entry", limit)
	}
	if lease < time.Millisecond {
		return fmt.Errorf("lease %v: leases count in milliseconds, use at least 1ms", lease)
	}
	return nil
}
