package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// Load reads run id, checkpoints n and n-1 and the journal and failures of
// step n with concurrent gets. The parts are not one snapshot; a worker
// never needs that: the commit's revision check catches a run that moved
// since.
func (s *Store) Load(ctx context.Context, id string, n int) (checkpoint.Snapshot, error) {
	if err := readID(id); err != nil {
		return checkpoint.Snapshot{}, fmt.Errorf("load %s:%d: %w", id, n, err)
	}
	var (
		snap             checkpoint.Snapshot
		wg               sync.WaitGroup
		runErr, cur, prv error
		journalErr       error
		failuresErr      error
	)
	wg.Add(4)
	go func() {
		defer wg.Done()
		snap.Run, runErr = s.GetRun(ctx, id)
	}()
	go func() {
		defer wg.Done()
		snap.Current, cur = s.optionalCheckpoint(ctx, id, n)
	}()
	go func() {
		defer wg.Done()
		snap.Journal, journalErr = s.journal(ctx, id, n)
	}()
	go func() {
		defer wg.Done()
		snap.Failures, failuresErr = s.failures(ctx, id, n)
	}()
	if n > 1 {
		snap.Previous, prv = s.optionalCheckpoint(ctx, id, n-1)
	}
	wg.Wait()
	if err := errors.Join(runErr, cur, prv, journalErr, failuresErr); err != nil {
		return checkpoint.Snapshot{}, fmt.Errorf("load %s:%d: %w", id, n, err)
	}
	return snap, nil
}

func (s *Store) optionalCheckpoint(ctx context.Context, id string, n int) (*checkpoint.Checkpoint, error) {
	cp, err := s.Checkpoint(ctx, id, n)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &cp, nil
}

// Checkpoint returns checkpoint n of run id, or ErrNotFound.
func (s *Store) Checkpoint(ctx context.Context, id string, n int) (checkpoint.Checkpoint, error) {
	if err := readID(id); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, err)
	}
	e, err := s.get(ctx, cpKey(id, n))
	if err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, err)
	}
	if !e.found {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, checkpoint.ErrNotFound)
	}
	var cp checkpoint.Checkpoint
	if err := unmarshal(e.value, &cp); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, err)
	}
	return cp, nil
}

// Checkpoints returns all checkpoints of run id in step order, read with
// one watcher over cp.<id>.* rather than a get per step.
func (s *Store) Checkpoints(ctx context.Context, id string) ([]checkpoint.Checkpoint, error) {
	if _, err := s.GetRun(ctx, id); err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []checkpoint.Checkpoint
	prefix := cpKey(id, 0)
	prefix = prefix[:len(prefix)-1] // "cp.<id>."
	err := s.scan(ctx, prefix+"*", func(e jetstream.KeyValueEntry) error {
		if _, err := strconv.Atoi(strings.TrimPrefix(e.Key(), prefix)); err != nil {
			return fmt.Errorf("unexpected key %s", e.Key())
		}
		var cp checkpoint.Checkpoint
		if err := unmarshal(e.Value(), &cp); err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		out = append(out, cp)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints %s: %w", id, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}
