package flow

import "time"

// SetLinger sets how long a record holding a slow-down only outlives its
// block, so that a test sees it go in seconds.
func (s *Store) SetLinger(d time.Duration) { s.linger = d }

// SetClock sets the clock of s's Set, so that a test's limits are set in
// the time its takes are given.
func (s *Store) SetClock(now func() time.Time) { s.now = now }
