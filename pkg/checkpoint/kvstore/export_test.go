package kvstore

import "context"

// SetAfterCheckpoint makes s run fn between the two writes of every
// commit, so tests can put a concurrent writer (or a crash) exactly there.
func SetAfterCheckpoint(s *Store, fn func(ctx context.Context)) { s.afterCheckpoint = fn }

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
