package kvstore

import (
	"context"
	"time"
)

// SetAfterCheckpoint makes s run fn between the two writes of every
// commit, so tests can put a concurrent writer (or a crash) exactly there.
func SetAfterCheckpoint(s *Store, fn func(ctx context.Context)) { s.afterCheckpoint = fn }

// SetAfterIndex makes s run fn after the index entries of a two-write
// record write, before the record; SetAfterRecord after the record,
// before the markers of the entries it drops.
func SetAfterIndex(s *Store, fn func(ctx context.Context))  { s.afterIndex = fn }
func SetAfterRecord(s *Store, fn func(ctx context.Context)) { s.afterRecord = fn }

// SetAfterTomb makes s run fn in every purge after the tombstone is
// written, before the run's keys are deleted; SetFinishAfter sets how old
// a tombstone must be for EndedBefore to finish its purge.
func SetAfterTomb(s *Store, fn func(ctx context.Context)) { s.afterTomb = fn }
func SetFinishAfter(s *Store, d time.Duration)            { s.finishAfter = d }

// SetRefresh sets how often s writes again the directory keys of its
// listings' paths to now (refreshAge).
func SetRefresh(s *Store, d time.Duration) { s.refresh = d }

// SetOnRead makes s pass fn the stream sequence of every message a
// direct get of it reads.
func SetOnRead(s *Store, fn func(seqs []uint64)) {
	s.onRead = func(msgs []ixMsg) {
		seqs := make([]uint64, len(msgs))
		for i, m := range msgs {
			seqs[i] = m.seq
		}
		fn(seqs)
	}
}

// SweepNow makes s's next EndedBefore that finds fewer runs than its
// limit sweep, however recent its last sweep.
func SweepNow(s *Store) { s.swept.Store(0) }

// Batches reports whether s commits in one atomic batch, deciding as its
// first commit would when it has not yet.
func Batches(s *Store) bool {
	s.enableBatches(context.Background())
	return s.batches.Load()
}

// SetBatches makes s commit in one atomic batch or in two writes, as a
// process of an older version (two writes) would on the same bucket.
func SetBatches(s *Store, on bool) {
	s.enableOnce.Do(func() {})
	s.batches.Store(on)
}

// LoseCountWrites makes s drop the writes of its shard of the counts of
// ended runs, as a crash after each record write would.
func LoseCountWrites(s *Store, on bool) { s.loseCounts = on }

// MaintainCountsAt runs the recount of the ended runs as if at now.
func MaintainCountsAt(ctx context.Context, s *Store, now time.Time) error {
	return s.maintainCountsAt(ctx, now)
}

// PurgeAnswer reads the answer to a purge request (purgeAnswer).
func PurgeAnswer(data []byte) error { return purgeAnswer("k", data) }
