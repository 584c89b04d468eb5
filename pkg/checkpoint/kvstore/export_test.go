package kvstore

import "context"

// SetAfterCheckpoint makes s run fn between the two writes of every
// commit, so tests can put a concurrent writer (or a crash) exactly there.
func SetAfterCheckpoint(s *Store, fn func(ctx context.Context)) { s.afterCheckpoint = fn }
