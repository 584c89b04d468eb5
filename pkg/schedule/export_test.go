package schedule

import (
	"context"
	"time"
)

// SetClock sets the clock of s's creates, pauses and resumes, so that a
// test's schedules live in the time its firers are given.
func (s *Store) SetClock(now func() time.Time) { s.now = now }

// DecideOnly stores the decision of name's fire at at and stops there,
// as a firer that died before carrying it out would.
func (f *Firer) DecideOnly(ctx context.Context, name string, at time.Time) error {
	r, err := f.store.get(ctx, name)
	if err != nil {
		return err
	}
	_, err = f.decide(ctx, &r, at, false)
	return err
}
