package schedule

import (
	"context"
	"encoding/json"
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
	_, err = f.decide(ctx, &r, &pending{At: at, RunID: FireID(name, at)})
	return err
}

// DecideTriggerOnly stores the decision of a trigger of name at at by by
// and stops there, as a firer that died before carrying it out would.
func (f *Firer) DecideTriggerOnly(ctx context.Context, name string, at time.Time, by string) error {
	r, err := f.store.get(ctx, name)
	if err != nil {
		return err
	}
	_, err = f.decide(ctx, &r, (&trigger{at: at, by: by}).decision(name))
	return err
}

// Fill stores schedules of specs without counting the store first
// (Create's count makes filling a store quadratic), for benchmarks.
func (s *Store) Fill(ctx context.Context, specs []Spec) error {
	for _, spec := range specs {
		sp, err := spec.normalize()
		if err != nil {
			return err
		}
		now := s.now().UTC()
		data, err := json.Marshal(record{Schedule: Schedule{Spec: sp, CreatedAt: now, UpdatedAt: now, ActiveSince: now}})
		if err != nil {
			return err
		}
		if _, err := s.kv.Create(ctx, key(sp.Name), data); err != nil {
			return err
		}
	}
	return nil
}

// SetFiresPerPass sets how many fires of one schedule a FireDue call of
// f decides.
func (f *Firer) SetFiresPerPass(n int) { f.perPass = n }
