package schedule

import (
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // time zones work on hosts without /usr/share/zoneinfo (a distroless image)

	"github.com/robfig/cron/v3"
)

// clock is a parsed cron expression in its time zone.
//
// robfig/cron reads the expression (the standard grammar and its
// errors); the fire times are computed here. robfig's own Next walks the
// zone's clock instant by instant, so a wall-clock time that the clock
// skips never fires (02:30 on a spring-forward day) and one that occurs
// twice fires twice. Instead the expression is matched on the wall clock
// as if it had no changes (a naive clock: robfig's Next in UTC), and each
// wall-clock time it matches is placed on the timeline as RFC 5545 places
// local times: at its first occurrence, or, in a gap, with the offset
// before the gap (instant).
type clock struct {
	expr *cron.SpecSchedule
	loc  *time.Location
}

// parse reads a cron expression and an IANA time zone name.
func parse(expr, tz string) (clock, error) {
	loc, err := zone(tz)
	if err != nil {
		return clock{}, err
	}
	e := strings.TrimSpace(expr)
	switch {
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		// Set apart, the zone is validated, shown and stored on its own;
		// robfig also panics on "TZ=UTC" with no fields after it.
		return clock{}, badSpec("cron expression %q: give the time zone as the schedule's time zone, not in the expression", expr)
	case strings.HasPrefix(e, "@every"):
		return clock{}, badSpec("cron expression %q: @every is not supported (its times depend on when the schedule was made); use a cron expression, e.g. \"*/10 * * * *\"", expr)
	}
	s, err := cron.ParseStandard(e)
	if err != nil {
		return clock{}, badSpec("cron expression %q: %v", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return clock{}, badSpec("cron expression %q: not a calendar expression", expr)
	}
	spec.Location = time.UTC // the naive clock
	return clock{expr: spec, loc: loc}, nil
}

// zones caches the time zones loaded (time.LoadLocation reads its file
// each time): at most the few hundred names of the tz database.
var zones sync.Map // name -> *time.Location

// zone loads an IANA time zone; "Local" is refused: a schedule must not
// change with the host its scheduler runs on.
func zone(tz string) (*time.Location, error) {
	if loc, ok := zones.Load(tz); ok {
		return loc.(*time.Location), nil
	}
	if tz == "Local" {
		return nil, badSpec("time zone %q: name the zone (an IANA name such as Europe/Berlin, or UTC)", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, badSpec("time zone %q: unknown (use an IANA name such as Europe/Berlin, or UTC)", tz)
	}
	zones.Store(tz, loc)
	return loc, nil
}

// maxSteps bounds the naive times next looks at for one fire: those of a
// repeated hour (at most 60 a clock change) and of the day's gap.
const maxSteps = 10_000

// next is the first fire time after t, zero if none within robfig's
// horizon (5 years).
func (c clock) next(t time.Time) time.Time {
	wall := naive(t, c.loc)
	// The wall times skipped by a jump forward fire after it (instant):
	// after a recent jump, look from the time before it.
	_, off := t.In(c.loc).Zone()
	if _, before := t.Add(-24 * time.Hour).In(c.loc).Zone(); off > before {
		wall = wall.Add(-time.Duration(off-before) * time.Second)
	}
	for range maxSteps {
		w := c.expr.Next(wall)
		if w.IsZero() {
			return time.Time{}
		}
		if at := instant(w, c.loc); at.After(t) {
			return at
		}
		wall = w
	}
	return time.Time{}
}

// naive is the wall-clock reading of t in loc, as a UTC time.
func naive(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant places the naive wall-clock time w of loc on the timeline, as
// RFC 5545 (3.3.5) reads a local time: one that occurs twice is its
// first occurrence; one that does not occur (in the gap of a jump
// forward) takes the offset before the gap, so 02:30 in a gap from 02:00
// to 03:00 is 03:30 after it. (time.Date leaves this unspecified, and
// takes the second occurrence.) Clock changes are assumed more than a
// day apart.
func instant(w time.Time, loc *time.Location) time.Time {
	var at time.Time
	for _, probe := range [2]time.Time{w.Add(-24 * time.Hour), w.Add(24 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		t := w.Add(-time.Duration(off) * time.Second)
		if _, o := t.In(loc).Zone(); o == off && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	if at.IsZero() { // in a gap
		_, before := w.Add(-24 * time.Hour).In(loc).Zone()
		at = w.Add(-time.Duration(before) * time.Second)
	}
	return at.UTC()
}

// due lists the fire times owed at now after last (the newest fire
// handled, or when the schedule began to owe fires), oldest first: those
// in (last, now] and within window of now; only the newest of them when
// all is false.
func (c clock) due(last, now time.Time, window time.Duration, all bool) []time.Time {
	from := last
	if oldest := now.Add(-window); oldest.After(from) {
		from = oldest
	}
	var out []time.Time
	for t := c.next(from); !t.IsZero() && !t.After(now); t = c.next(t) {
		if !all {
			out = out[:0]
		}
		out = append(out, t)
	}
	return out
}

// Next returns the first fire time of s after t (UTC), or an error
// wrapping ErrBadSpec when s is invalid.
func (s Spec) Next(t time.Time) (time.Time, error) {
	s, err := s.normalize()
	if err != nil {
		return time.Time{}, err
	}
	c, _ := parse(s.Cron, s.TimeZone)
	return c.next(t), nil
}

// Due returns the fire times s owes at now (UTC, oldest first), after
// last: the newest fire already handled, or, before the first, when the
// schedule was created or resumed (it owes no earlier fire). A fire is
// owed when it is after last, not after now, and less than
// CatchUpWindow before now; under CatchUpLast only the newest such fire
// is. Paused is not looked at: a paused schedule owes nothing (see
// Schedule.Due).
func (s Spec) Due(last, now time.Time) ([]time.Time, error) {
	s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	c, _ := parse(s.Cron, s.TimeZone)
	return c.due(last, now, s.CatchUpWindow, s.CatchUp == CatchUpAll), nil
}
