package schedule

import "time"

// Schedule is a stored schedule: its spec, who made and changed it, and
// where its firing stands.
type Schedule struct {
	// Spec as stored: validated, with its defaults spelled out.
	Spec      Spec      `json:"spec"`
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedBy string    `json:"updated_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
	// ActiveSince is when the schedule was created or last resumed: it
	// owes no fire before.
	ActiveSince time.Time `json:"active_since"`
	State       State     `json:"state"`

	rev uint64 // the KV revision it was read at
}

// State is where a schedule's firing stands. Firers write it,
// compare-and-set on the schedule's revision.
type State struct {
	// LastFire is the newest fire time handled (started, skipped or
	// failed); zero before the first. Triggers leave it.
	LastFire time.Time `json:"last_fire,omitzero"`
	// LastRunID is the run the newest started fire or trigger started:
	// the run the overlap policy looks at.
	LastRunID string `json:"last_run_id,omitempty"`
	// Last is the newest fire or trigger handled.
	Last *Fire `json:"last,omitempty"`
}

// Result says what became of a fire.
type Result string

const (
	// Started: the fire's run was started (or had been, by another firer).
	Started Result = "started"
	// Skipped: the overlap policy skipped it (Fire.Reason says why).
	Skipped Result = "skipped"
	// Failed: the run could not be started (Fire.Reason says why): its
	// input or id was refused, or it was not started within the catch-up
	// window.
	Failed Result = "failed"
)

// Fire is one fire of a schedule, as handled.
type Fire struct {
	Schedule string    `json:"schedule"`
	At       time.Time `json:"at"`
	RunID    string    `json:"run_id"`
	Result   Result    `json:"result"`
	// Trigger: an operator's trigger (Firer.Trigger), not the expression.
	Trigger bool `json:"trigger,omitempty"`
	// By is who triggered it (Firer.Trigger with By); empty for a fire
	// of the expression, and for a trigger that named no one.
	By string `json:"by,omitempty"`
	// Cancelled is the previous run it cancelled (OverlapCancelPrevious).
	Cancelled string `json:"cancelled,omitempty"`
	// Reason says why it was skipped or failed.
	Reason string `json:"reason,omitempty"`
}

// since is the time after which s owes fires.
func (s Schedule) since() time.Time {
	if s.State.LastFire.After(s.ActiveSince) {
		return s.State.LastFire
	}
	return s.ActiveSince
}

// Due returns the fire times the schedule owes at now, oldest first
// (Spec.Due after its last fire, or since it became active); none while
// paused.
func (s Schedule) Due(now time.Time) []time.Time {
	sp := s.Spec.withDefaults()
	if sp.Paused {
		return nil
	}
	c, err := parse(sp.Cron, sp.TimeZone)
	if err != nil {
		return nil
	}
	return c.due(s.since(), now, sp.CatchUpWindow, sp.CatchUp == CatchUpAll)
}

// NextFire is the schedule's next fire as of now: the oldest fire it
// owes (overdue when before now), or its first fire after now; zero while
// paused.
func (s Schedule) NextFire(now time.Time) time.Time {
	if due := s.Due(now); len(due) > 0 {
		return due[0]
	}
	return s.nextAfter(now)
}

// nextAfter is the first fire after now, zero while paused.
func (s Schedule) nextAfter(now time.Time) time.Time {
	sp := s.Spec.withDefaults()
	if sp.Paused {
		return time.Time{}
	}
	c, err := parse(sp.Cron, sp.TimeZone)
	if err != nil {
		return time.Time{}
	}
	return c.next(now)
}
