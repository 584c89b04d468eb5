package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// maxSettleRetries bounds the compare-and-set loops of a commit: the one
// that moves a run onto a checkpoint whose commit lost the run's revision
// (two writes), and the one that writes over a checkpoint of an earlier
// generation (both ways). Each lost round means a key changed again
// meanwhile.
const maxSettleRetries = 100

// Commit writes cp first-writer-wins within its generation, together
// with run, provided run.Rev is still the run's revision. How depends on
// the bucket (see stagesOnDisk and enableBatches):
//
//   - one atomic batch (commitBatch) on a replicated or memory bucket:
//     both land or neither, as the Store contract says;
//   - two writes (commitTwoWrites) on a one-replica file bucket, where
//     the server's atomic batches cost too much: the checkpoint, then the
//     run, so that a crash between leaves the run lagging its checkpoint,
//     which the worker rolls forward.
//
// Either way cp.<R>.<n> is create-only within a generation: a loser gets
// ErrCheckpointExists and has written nothing. The one exception is a
// checkpoint n of an earlier generation (its Gen below cp.Gen): the
// result of an attempt that ran before the run parked at n and was
// decided, which no run adopts. It is written over, compare-and-set on
// its revision.
func (s *Store) Commit(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint) (checkpoint.Run, error) {
	if cp.RunID == "" {
		cp.RunID = run.ID
	}
	if err := checkCommit(run, cp); err != nil {
		return checkpoint.Run{}, err
	}
	fail := func(err error) (checkpoint.Run, error) {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d at rev %d: %w", run.ID, cp.Step, run.Rev, err)
	}
	// Revision 0 would make the run update a create: never write then.
	if run.Rev == 0 {
		return fail(s.whyRefused(ctx, run.ID, cp.Step))
	}
	cpDoc, err := marshal(cp)
	if err != nil {
		return fail(err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if err := s.spill(ctx, &run); err != nil {
		return fail(err)
	}
	s.enableBatches(ctx)
	commit := s.commitTwoWrites
	if s.batches.Load() {
		commit = s.commitBatch
	}
	stored, err := commit(ctx, run, cp, cpDoc)
	if err != nil {
		return fail(err)
	}
	return stored, nil
}

// commitTwoWrites stores cpDoc, then moves the run:
//
//  1. cp.<R>.<n>, create-only (see writeCheckpoint);
//  2. run.<R> compare-and-set on run.Rev (writeRun: with the run's new
//     index entries before it and the markers of its old ones after it,
//     when the commit changes its status).
//
// The run only moves after its checkpoint is stored, so a crash between
// the two leaves a run that lags its checkpoint, which the worker rolls
// forward on redelivery. If step 2 loses its revision, the checkpoint is
// stored all the same; settle then makes the run agree with it when it is
// still the run's step n of the same generation, instead of undoing it: a
// concurrent reader may already have rolled the run forward over it.
func (s *Store) commitTwoWrites(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint, cpDoc []byte) (checkpoint.Run, error) {
	key := cpKey(run.ID, cp.Step)
	seq, err := s.writeCheckpoint(ctx, key, cp.Gen, cpDoc)
	if err != nil {
		// ErrCheckpointExists, or no PubAck: the checkpoint may or may
		// not be stored. The caller retries the step, whose Load finds out.
		return checkpoint.Run{}, err
	}
	if s.afterCheckpoint != nil {
		s.afterCheckpoint(ctx)
	}
	b, ok, err := s.loadBase(ctx, run.ID, run.Rev)
	if err != nil {
		// The run may lag the checkpoint, or was purged.
		return checkpoint.Run{}, s.unlessPurged(ctx, err, key, seq)
	}
	if !ok {
		return s.settle(ctx, run, cp, seq) // the run moved since the caller read it
	}
	stored, err := s.writeRun(ctx, b, run, s.plan(b, run))
	if errors.Is(err, errWrongRevision) {
		return s.settle(ctx, run, cp, seq)
	}
	if err != nil {
		// The checkpoint is stored; the run may lag it, which the
		// redelivery's Load sees and rolls forward.
		return checkpoint.Run{}, err
	}
	return stored, nil
}

// writeCheckpoint stores doc, a checkpoint of generation gen, on key:
// create-only, but over a checkpoint of an earlier generation, or over a
// delete marker (older versions of this store removed the checkpoint of a
// commit to a missing run), compare-and-set on its revision; and returns
// its revision. ErrCheckpointExists when the key holds a checkpoint of
// generation gen or later. A key's generation only grows, so a read that
// lags shows a generation no higher than the stored one: its "exists"
// answer holds, and its revision at worst makes the compare-and-set fail
// and read again.
func (s *Store) writeCheckpoint(ctx context.Context, key string, gen int, doc []byte) (uint64, error) {
	var rev uint64 // 0: the key has no message at all
	for range maxSettleRetries {
		seq, err := s.put(ctx, key, doc, rev)
		if !errors.Is(err, errWrongRevision) {
			return seq, err
		}
		e, err := s.get(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("checkpoint %s exists, not read: %w", key, err)
		}
		if e.found {
			stored, err := checkpointGen(key, e.value)
			if err != nil {
				return 0, err
			}
			if stored >= gen {
				return 0, checkpoint.ErrCheckpointExists
			}
		}
		rev = e.rev
	}
	return 0, fmt.Errorf("checkpoint %s still contended after %d attempts", key, maxSettleRetries)
}

// unlessPurged returns err, and when it says the run was purged (its
// tombstone is the record) deletes the checkpoint this commit stored on
// key at seq first: no run will adopt it, and were the id free again
// once the tombstone expires, a new run of that id must not find it.
// The marker is conditional on seq: another writer's message stays.
func (s *Store) unlessPurged(ctx context.Context, err error, key string, seq uint64) error {
	if errors.Is(err, checkpoint.ErrPurged) {
		if _, uerr := s.publish(ctx, key, s.markerMsg(key, seq), seq); uerr != nil {
			return errors.Join(err, fmt.Errorf("checkpoint %s of the purged run not deleted: %w", key, uerr))
		}
	}
	return err
}

// settle finishes a commit whose checkpoint n is stored but whose run
// compare-and-set lost: the run record changed after the caller read it.
// The checkpoint stays (first writer wins), and the run record decides:
//
//   - a resume generation other than the checkpoint's (the run parked at
//     step n and was decided since the step began, or is parked there
//     now): ErrConflict. The decision is what counts; the checkpoint
//     stays, adopted by no one, and the resumed step's commit writes over
//     it (see writeCheckpoint).
//   - still running at step n (an audit entry, a redrive, a roll-forward
//     race lost by nobody yet): the commit's cursor fields are set on the
//     current record and the commit succeeds;
//   - already moved past n by a reader that found the checkpoint and
//     rolled the run forward: the commit succeeds with the stored run;
//   - anything else (cancelled, dead at step n): ErrConflict. The run
//     record is the truth; the checkpoint stays as a record of work done,
//     and is adopted only if the run runs step n again in the same
//     generation (a redrive).
//   - no run at all: ErrNotFound, and the checkpoint stays too. Removing
//     it would reopen the key to a second, different result should the
//     read be wrong.
//   - the run's tombstone (a purge replaced the record after the caller
//     read it): its *checkpoint.PurgedError, which is ErrNotFound, and
//     the checkpoint written at seq is deleted (unlessPurged). The
//     tombstone keeps the id from a new run while it is kept; the purge
//     deleted the run's other keys, and may have listed them before this
//     one was written.
//
// A key's generation only grows and the run's with it: when the stored
// run's generation is the checkpoint's, no later generation wrote over
// it, so the checkpoint settled on is this commit's own.
func (s *Store) settle(ctx context.Context, next checkpoint.Run, cp checkpoint.Checkpoint, seq uint64) (checkpoint.Run, error) {
	for range maxSettleRetries {
		e, err := s.get(ctx, runKey(next.ID))
		if err != nil {
			return checkpoint.Run{}, fmt.Errorf("checkpoint stored, run not updated: %w", err)
		}
		if !e.found {
			return checkpoint.Run{}, fmt.Errorf("checkpoint stored, run missing: %w", checkpoint.ErrNotFound)
		}
		stored, ix, err := decodeStored(next.ID, e.value, e.rev)
		if errors.Is(err, checkpoint.ErrPurged) {
			return checkpoint.Run{}, s.unlessPurged(ctx, err, cpKey(next.ID, cp.Step), seq)
		}
		if err != nil {
			return checkpoint.Run{}, fmt.Errorf("checkpoint stored, run not updated: %w", err)
		}
		b := baseOf(stored, ix)
		s.runs.put(stored.ID, b)
		switch {
		case stored.Resumes != cp.Gen:
			return checkpoint.Run{}, fmt.Errorf("checkpoint of generation %d stored, run at generation %d: %w", cp.Gen, stored.Resumes, checkpoint.ErrConflict)
		case stored.Status == checkpoint.StatusRunning && stored.Step == cp.Step:
			merged := withCursor(stored, next, cp)
			if err := s.spill(ctx, &merged); err != nil {
				return checkpoint.Run{}, fmt.Errorf("checkpoint stored, run not updated: %w", err)
			}
			merged, err := s.writeRun(ctx, b, merged, s.plan(b, merged))
			if errors.Is(err, errWrongRevision) {
				continue
			}
			if err != nil {
				return checkpoint.Run{}, fmt.Errorf("checkpoint stored, run not updated: %w", err)
			}
			return merged, nil
		case advancedBy(stored, cp):
			return stored, nil
		default:
			return checkpoint.Run{}, checkpoint.ErrConflict
		}
	}
	return checkpoint.Run{}, fmt.Errorf("checkpoint stored, run still contended after %d attempts: %w", maxSettleRetries, checkpoint.ErrConflict)
}

// withCursor returns stored with the fields a commit of cp sets taken
// from next: the cursor, the status and its wait or error, the step
// counters, the signals the step consumed. What others record on a run
// (approvals, audit, resumes, redrives, new signals) is kept. The store
// does not decide what a commit does to a run: next is the caller's
// (the worker's transition.Commit), and this only carries its fields
// onto the record as it is now.
func withCursor(stored, next checkpoint.Run, cp checkpoint.Checkpoint) checkpoint.Run {
	stored.Status, stored.Step, stored.StepName = next.Status, next.Step, next.StepName
	stored.Wait, stored.Error = next.Wait, next.Error
	stored.Steps, stored.Spend = next.Steps, next.Spend
	stored.UpdatedAt = next.UpdatedAt
	stored.ConsumeSignals(cp.Step, cp.Signals)
	return stored
}

// advancedBy reports whether run has already moved on from step cp.Step
// by cp: past the step, or ended at it with cp's terminal status.
func advancedBy(run checkpoint.Run, cp checkpoint.Checkpoint) bool {
	if run.Step > cp.Step {
		return true
	}
	return run.Step == cp.Step && cp.Status.Terminal() && run.Status == cp.Status
}

func checkCommit(run checkpoint.Run, cp checkpoint.Checkpoint) error {
	if err := readID(run.ID); err != nil {
		return fmt.Errorf("commit checkpoint: %w", err)
	}
	if cp.RunID != run.ID {
		return fmt.Errorf("commit checkpoint %s:%d: checkpoint belongs to run %q", run.ID, cp.Step, cp.RunID)
	}
	if cp.Step < 1 {
		return fmt.Errorf("commit checkpoint %s:%d: steps count from 1", run.ID, cp.Step)
	}
	return nil
}
