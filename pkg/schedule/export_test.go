package schedule

import "time"

// SetClock sets the clock of s's creates, pauses and resumes, so that a
// test's schedules live in the time its firers are given.
func (s *Store) SetClock(now func() time.Time) { s.now = now }
