package flow

import "time"

// SetLinger sets how long a record holding a slow-down only outlives its
// block, so that a test sees it go in seconds.
func (s *Store) SetLinger(d time.Duration) { s.linger = d }
