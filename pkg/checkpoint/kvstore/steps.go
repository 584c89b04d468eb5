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

// Load reads run id and what its step or branch at needs: for step n,
// checkpoints n and n-1 and the journal and failures of step n; for
// branch i of the fan-out whose join is step n, the branch's checkpoint,
// the fan-out's checkpoint n-1, the branch's journal and failures and
// what the fan-out's branches spent. The run is read alongside the other
// keys; the parts are not one snapshot, and a worker never needs that:
// the commit's revision check catches a run that moved since.
//
// On a step's first attempt the step's keys take one read (see
// loadFirstAttempt); otherwise, or when that read cannot tell, and for a
// branch, they take one get each, at once.
func (s *Store) Load(ctx context.Context, id string, at checkpoint.StepRef) (checkpoint.Snapshot, error) {
	fail := func(err error) (checkpoint.Snapshot, error) {
		return checkpoint.Snapshot{}, fmt.Errorf("load %s:%s: %w", id, at, err)
	}
	if err := readID(id); err != nil {
		return fail(err)
	}
	if at.IsBranch() && (at.Step < 2 || at.Branch < 1) {
		return fail(errors.New("a branch's join is a step after its fan-out, and branches count from 1"))
	}
	snap, err := s.withRun(ctx, id, func(snap *checkpoint.Snapshot) error {
		if at.IsBranch() {
			return s.loadStep(ctx, id, at.Step, at.Branch, snap)
		}
		done, err := s.loadFirstAttempt(ctx, id, at.Step, snap)
		if err == nil && !done {
			err = s.loadStep(ctx, id, at.Step, 0, snap)
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	return snap, nil
}

// withRun reads run id while read fills in the rest of the snapshot.
func (s *Store) withRun(ctx context.Context, id string, read func(*checkpoint.Snapshot) error) (checkpoint.Snapshot, error) {
	var (
		snap   checkpoint.Snapshot
		runErr error
		ran    = make(chan struct{})
	)
	go func() {
		defer close(ran)
		snap.Run, runErr = s.GetRun(ctx, id)
	}()
	err := read(&snap)
	<-ran
	return snap, errors.Join(runErr, err)
}

// loadFirstAttempt reads the newest message on any key "*.<R>.*": every
// checkpoint, journal and failures key of the run. Everything written for
// step n (its checkpoint, journal, failures) is written by an attempt that
// found the run at step n, which it reaches only over the version of
// checkpoint n-1 it stands on (a checkpoint key rewritten for a later
// generation holds that version as its newest message), so after it in
// the stream. Hence when the
// newest is checkpoint n-1 itself, step n has nothing yet: Previous is
// that checkpoint and the rest is empty; when the run has no such key at
// all, neither has step n. Any other answer (a retry, a replay, a delete
// marker, a workflow key named like the run) and done is false.
func (s *Store) loadFirstAttempt(ctx context.Context, id string, n int, snap *checkpoint.Snapshot) (done bool, err error) {
	subject, e, err := s.getLast(ctx, "*."+id+".*")
	switch {
	case err != nil:
		return false, err
	case !e.found && e.rev == 0:
		return true, nil // nothing at all: no checkpoint, journal or failures
	case !e.found || n < 2 || subject != s.subjects+cpKey(id, n-1):
		return false, nil
	}
	var prev checkpoint.Checkpoint
	if err := unmarshal(e.value, &prev); err != nil {
		return false, fmt.Errorf("checkpoint %d: %w", n-1, err)
	}
	snap.Previous = &prev
	return true, nil
}

// loadStep reads checkpoints n and n-1 and the journal and failures of
// step n with concurrent gets; for i > 0, those of branch i of the
// fan-out whose join is step n instead of step n's, and the fan-out's
// spend.
func (s *Store) loadStep(ctx context.Context, id string, n, i int, snap *checkpoint.Snapshot) error {
	var (
		wg                     sync.WaitGroup
		cur, prv, spendErr     error
		journalErr, failuresEr error
	)
	if i > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			snap.BranchSpend, spendErr = s.readBranchSpend(ctx, id, n)
		}()
	}
	wg.Add(3)
	go func() {
		defer wg.Done()
		snap.Current, cur = s.optionalCheckpoint(ctx, branchKey(cpKey(id, n), i))
	}()
	go func() {
		defer wg.Done()
		snap.Journal, journalErr = s.journal(ctx, branchKey(journalKey(id, n), i))
	}()
	go func() {
		defer wg.Done()
		snap.Failures, failuresEr = s.failures(ctx, branchKey(failuresKey(id, n), i))
	}()
	if n > 1 {
		snap.Previous, prv = s.optionalCheckpoint(ctx, cpKey(id, n-1))
	}
	wg.Wait()
	return errors.Join(cur, prv, journalErr, failuresEr, spendErr)
}

// optionalCheckpoint reads the checkpoint at key, nil when there is none.
func (s *Store) optionalCheckpoint(ctx context.Context, key string) (*checkpoint.Checkpoint, error) {
	e, err := s.get(ctx, key)
	if err != nil || !e.found {
		return nil, err
	}
	var cp checkpoint.Checkpoint
	if err := unmarshal(e.value, &cp); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
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
