package scheduler

import (
	"context"
	"time"

	"github.com/durable-run/durable/pkg/schedule"
)

// FireSchedules fires the due schedules of Config.Schedules until ctx
// ends: at once, then at the next fire time of any schedule, and at
// least every ScheduleInterval (schedules created, resumed or deleted
// by other processes are seen within it). Several schedulers may fire
// the same schedules: each fire starts one run (schedule.Firer).
func (s *Scheduler) FireSchedules(ctx context.Context) {
	f := schedule.NewFirer(s.cfg.Schedules, s.cfg.Client)
	for ctx.Err() == nil {
		now := s.cfg.Now()
		rep, err := f.FireDue(ctx, now)
		if err != nil && ctx.Err() == nil {
			s.c.errors.Add(1)
			s.log.Warn().Err(err).Msg("fire schedules")
		}
		for _, fire := range rep.Fires {
			s.countFire(fire)
		}
		wait := s.cfg.ScheduleInterval
		if !rep.Next.IsZero() {
			wait = min(wait, max(rep.Next.Sub(now), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// countFire counts and logs one fire a pass handled.
func (s *Scheduler) countFire(f schedule.Fire) {
	ev := s.log.Info()
	switch f.Result {
	case schedule.Started:
		s.c.fires[0].Add(1)
	case schedule.Skipped:
		s.c.fires[1].Add(1)
	default:
		s.c.fires[2].Add(1)
		ev = s.log.Warn()
	}
	ev = ev.Str("schedule", f.Schedule).Time("fire", f.At).Str("run_id", f.RunID).Str("result", string(f.Result))
	if f.Cancelled != "" {
		ev = ev.Str("cancelled", f.Cancelled)
	}
	if f.Reason != "" {
		ev = ev.Str("reason", f.Reason)
	}
	ev.Msg("schedule fired")
}
