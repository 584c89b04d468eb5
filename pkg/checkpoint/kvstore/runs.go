package kvstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// CreateRun stores run unless the id is taken (KV create-only), with its
// index entries. CreatedAt defaults to now and UpdatedAt to CreatedAt.
//
// In one atomic batch where the store sends batches; otherwise the
// entries first and the record after (see writeRun): a create refused
// because the run exists (a retried start) removes the entries it wrote,
// which the counts of an ended status count until their markers expire.
func (s *Store) CreateRun(ctx context.Context, run checkpoint.Run) (checkpoint.Run, error) {
	if err := checkID(run.ID); err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run: %w", err)
	}
	if run.CreatedAt.IsZero() {
		run.CreatedAt = time.Now().UTC()
	}
	if run.UpdatedAt.IsZero() {
		run.UpdatedAt = run.CreatedAt
	}
	fail := func(err error) (checkpoint.Run, error) {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, err)
	}
	w := s.plan(nil, run)
	if s.batches.Load() {
		var expect uint64
		for range 3 {
			stored, err := s.batchRun(ctx, nil, expect, run, w)
			if !errors.Is(err, errWrongRevision) {
				if err != nil {
					return fail(err)
				}
				return stored, nil
			}
			e, err := s.get(ctx, runKey(run.ID))
			if err != nil {
				return fail(err)
			}
			if e.found {
				break
			}
			expect = e.rev // a delete marker: create over it
		}
		return s.existing(ctx, run.ID)
	}
	stored, err := s.writeRun(ctx, nil, run, w)
	if errors.Is(err, errWrongRevision) {
		return s.existing(ctx, run.ID)
	}
	if err != nil {
		return fail(err)
	}
	return stored, nil
}

// existing answers a create of a run that exists: the stored run and
// ErrRunExists; for a purged run whose tombstone is kept, ErrRunExists
// and its *checkpoint.PurgedError.
func (s *Store) existing(ctx context.Context, id string) (checkpoint.Run, error) {
	existing, err := s.GetRun(ctx, id)
	var purged *checkpoint.PurgedError
	if errors.As(err, &purged) {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w: %w", id, checkpoint.ErrRunExists, purged)
	}
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run %s: read existing: %w", id, err)
	}
	return existing, fmt.Errorf("create run %s: %w", id, checkpoint.ErrRunExists)
}

// GetRun returns the run or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (checkpoint.Run, error) {
	if err := readID(id); err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run: %w", err)
	}
	e, err := s.get(ctx, runKey(id))
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	if !e.found {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, checkpoint.ErrNotFound)
	}
	run, ix, err := decodeStored(id, e.value, e.rev)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	s.runs.put(id, baseOf(run, ix))
	return run, nil
}

// UpdateRun replaces the run if run.Rev is still its KV revision, with
// its index entries when its status changes: in one atomic batch where
// the store sends batches, otherwise as writeRun orders them. A stale
// revision writes nothing (the record it replaces is read first, unless
// this process read or wrote it last).
func (s *Store) UpdateRun(ctx context.Context, run checkpoint.Run) (checkpoint.Run, error) {
	if err := readID(run.ID); err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run: %w", err)
	}
	refused := func() (checkpoint.Run, error) {
		return checkpoint.Run{}, fmt.Errorf("update run %s at rev %d: %w", run.ID, run.Rev, s.whyRefused(ctx, run.ID, 0))
	}
	// Revision 0 would make Update a create: never let it resurrect a run.
	if run.Rev == 0 {
		return refused()
	}
	b, ok, err := s.loadBase(ctx, run.ID, run.Rev)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	if !ok {
		return refused()
	}
	if err := s.spill(ctx, &run); err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	w := s.plan(b, run)
	var stored checkpoint.Run
	if s.batches.Load() && w.touches() {
		stored, err = s.batchRun(ctx, b, b.rev, run, w)
	} else {
		stored, err = s.writeRun(ctx, b, run, w)
	}
	if errors.Is(err, errWrongRevision) {
		return refused()
	}
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	return stored, nil
}

// whyRefused names the sentinel for a refused write: ErrCheckpointExists
// if checkpoint n (n > 0) is there, ErrNotFound if the run is not (a
// *checkpoint.PurgedError if it was purged), otherwise ErrConflict. The
// answer is read after the fact, which is fine: every sentinel only tells
// the caller to re-read.
func (s *Store) whyRefused(ctx context.Context, id string, n int) error {
	if n > 0 {
		e, err := s.get(ctx, cpKey(id, n))
		if err != nil {
			return errors.Join(checkpoint.ErrConflict, err)
		}
		if e.found {
			return checkpoint.ErrCheckpointExists
		}
	}
	e, err := s.get(ctx, runKey(id))
	if err != nil {
		return errors.Join(checkpoint.ErrConflict, err)
	}
	if !e.found {
		return checkpoint.ErrNotFound
	}
	if isTomb(e.value) {
		return tombError(id, e.value)
	}
	return checkpoint.ErrConflict
}

// scan calls fn with the latest entry of every key matching filter, in
// the order they were written, using one ordered consumer instead of a
// get per key.
//
// The watcher's "initial values" are not a snapshot. It counts
// deliveries against the number pending when it started, so a key
// written again during the scan, whose older message the consumer had
// not reached, is skipped there and delivered after the count is
// reached: two workers registering the same workflows once hid one of
// them from a run start this way. A replicated bucket adds a second
// gap: the consumer sits on any replica, which can lag the writes its
// leader acknowledged (a due entry indexed a moment ago would be missing
// from the scheduler's claim). So after the initial values the scan asks
// the leader for the newest message on filter and reads on until the
// watcher has delivered it, keeping the latest entry of each key. The
// pending count a delivery carries does not say it either, even on a
// one-replica bucket: a scan that stopped at the first delivery leaving
// nothing pending still missed a rewritten key
// (checkpointtest's WorkflowsWhileReregistered).
func (s *Store) scan(ctx context.Context, filter string, fn func(jetstream.KeyValueEntry) error) error {
	w, err := s.kv.Watch(ctx, filter)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	latest := map[string]jetstream.KeyValueEntry{}
	var seen, upTo uint64
	initial := true
	check := func() (bool, error) {
		_, newest, err := s.getLast(ctx, filter)
		if err != nil {
			return false, err
		}
		upTo = newest.rev
		return seen >= upTo, nil
	}
	for attempt := 0; ; {
		var wait <-chan time.Time
		if !initial {
			wait = time.After(time.Duration(attempt+1) * 10 * time.Millisecond)
		}
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed before the initial values")
			}
			if e != nil {
				seen = max(seen, e.Revision())
				if e.Operation() == jetstream.KeyValuePut {
					latest[e.Key()] = e
				} else {
					delete(latest, e.Key())
				}
				if initial || seen < upTo {
					continue
				}
			} else { // the initial values are in
				initial = false
				if done, err := check(); err != nil || !done {
					if err != nil {
						return err
					}
					continue
				}
			}
		case <-wait:
			// Nothing came: the replica lags, or the message waited
			// for is gone (a purge marker expires). Ask again.
			attempt++
			done, err := check()
			if err != nil {
				return err
			}
			if !done {
				if attempt == scanAttempts {
					return fmt.Errorf("scan %s: the replica serving the watcher is behind its leader (sequence %d, leader %d) after %d tries", filter, seen, upTo, attempt)
				}
				continue
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		break
	}
	entries := make([]jetstream.KeyValueEntry, 0, len(latest))
	for _, e := range latest {
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b jetstream.KeyValueEntry) int { return cmp.Compare(a.Revision(), b.Revision()) })
	for _, e := range entries {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// scanAttempts bounds the reads of a scan on a lagging replica (about 2 s
// of waiting in all).
const scanAttempts = 20
