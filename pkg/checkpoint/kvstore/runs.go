package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// CreateRun stores run unless the id is taken (KV create-only). CreatedAt
// defaults to now and UpdatedAt to CreatedAt.
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
	doc, err := marshal(run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, err)
	}
	rev, err := s.create(ctx, runKey(run.ID), doc)
	if errors.Is(err, errWrongRevision) {
		existing, gerr := s.GetRun(ctx, run.ID)
		if gerr != nil {
			return checkpoint.Run{}, fmt.Errorf("create run %s: read existing: %w", run.ID, gerr)
		}
		return existing, fmt.Errorf("create run %s: %w", run.ID, checkpoint.ErrRunExists)
	}
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, err)
	}
	run.Rev = rev
	return run, nil
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
	run, err := decodeRunValue(e.value, e.rev)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// ListRuns reads every run with one watcher over run.* and filters in the
// client: an operator listing, not a hot path.
func (s *Store) ListRuns(ctx context.Context, f checkpoint.Filter) ([]checkpoint.Run, error) {
	var runs []checkpoint.Run
	err := s.scan(ctx, "run.*", func(e jetstream.KeyValueEntry) error {
		run, err := decodeRun(e)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		if (f.Status == "" || run.Status == f.Status) && (f.Workflow == "" || run.Workflow == f.Workflow) {
			runs = append(runs, run)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	sort.Slice(runs, func(i, j int) bool {
		if !runs[i].CreatedAt.Equal(runs[j].CreatedAt) {
			return runs[i].CreatedAt.Before(runs[j].CreatedAt)
		}
		return runs[i].ID < runs[j].ID
	})
	return runs, nil
}

// UpdateRun replaces the run if run.Rev is still its KV revision.
func (s *Store) UpdateRun(ctx context.Context, run checkpoint.Run) (checkpoint.Run, error) {
	if err := readID(run.ID); err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run: %w", err)
	}
	// Revision 0 would make Update a create: never let it resurrect a run.
	if run.Rev == 0 {
		return checkpoint.Run{}, fmt.Errorf("update run %s at rev 0: %w", run.ID, s.whyRefused(ctx, run.ID, 0))
	}
	if err := s.spill(ctx, &run); err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	doc, err := marshal(run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	rev, err := s.put(ctx, runKey(run.ID), doc, run.Rev)
	if errors.Is(err, errWrongRevision) {
		return checkpoint.Run{}, fmt.Errorf("update run %s at rev %d: %w", run.ID, run.Rev, s.whyRefused(ctx, run.ID, 0))
	}
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	run.Rev = rev
	return run, nil
}

// whyRefused names the sentinel for a refused write: ErrCheckpointExists if
// checkpoint n (n > 0) is there, ErrNotFound if the run is not, otherwise
// ErrConflict. The answer is read after the fact, which is fine: every
// sentinel only tells the caller to re-read.
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
	return checkpoint.ErrConflict
}

// scan calls fn with the latest entry of every key matching filter, using
// one ordered consumer instead of a get per key.
//
// On a replicated bucket the consumer sits on any replica, and a follower
// can lag the writes its leader acknowledged: a due entry indexed a
// moment ago would be missing from the scheduler's claim. So the scan
// first asks the leader for the newest message on filter, and reads again
// until the watcher has delivered it.
func (s *Store) scan(ctx context.Context, filter string, fn func(jetstream.KeyValueEntry) error) error {
	if s.directGet != "" { // one replica: the watcher reads the leader's store
		return s.watch(ctx, filter, jetstream.IgnoreDeletes(), fn)
	}
	for attempt := 1; ; attempt++ {
		_, newest, err := s.getLast(ctx, filter)
		if err != nil {
			return err
		}
		var entries []jetstream.KeyValueEntry
		var seen uint64
		err = s.watch(ctx, filter, nil, func(e jetstream.KeyValueEntry) error {
			seen = max(seen, e.Revision())
			if e.Operation() == jetstream.KeyValuePut {
				entries = append(entries, e)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if seen >= newest.rev {
			for _, e := range entries {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		}
		if attempt == scanAttempts {
			return fmt.Errorf("scan %s: the replica serving the watcher is behind its leader (sequence %d, leader %d) after %d tries", filter, seen, newest.rev, attempt)
		}
		select {
		case <-time.After(time.Duration(attempt) * 10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// scanAttempts bounds the reads of a scan on a lagging replica (about 2 s
// of waiting in all).
const scanAttempts = 20

// watch delivers the latest entry of every key matching filter (delete
// markers too, unless opt ignores them) to fn.
func (s *Store) watch(ctx context.Context, filter string, opt jetstream.WatchOpt, fn func(jetstream.KeyValueEntry) error) error {
	var opts []jetstream.WatchOpt
	if opt != nil {
		opts = append(opts, opt)
	}
	w, err := s.kv.Watch(ctx, filter, opts...)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed before the initial values")
			}
			if e == nil { // all current values delivered
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
