package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"time"
)

// View is a schedule as an operator sees it: the stored schedule and its
// next fire. It is the one JSON shape of a schedule that operators' tools
// print and serve (`durable schedule list --json`, the approver's
// /api/schedules): the schedule's fields, with state.last the newest fire
// or trigger handled and the run it started, and next_fire.
type View struct {
	Schedule
	// NextFire is Schedule.NextFire as of when the view was made: the
	// oldest fire owed, or the first after then; absent while paused.
	NextFire time.Time `json:"next_fire,omitzero"`
}

// ViewAt is s as an operator sees it at now.
func (s Schedule) ViewAt(now time.Time) View {
	return View{Schedule: s, NextFire: s.NextFire(now).UTC()}
}

// DecodeSpec reads a spec from JSON as Spec's JSON fields name it (name,
// workflow, cron, time_zone, input, overlap, catch_up, catch_up_window,
// paused), refusing a field it does not know: a misspelt "tz" must not
// make a schedule that runs in UTC. What it refuses wraps ErrBadSpec. It
// does not validate the spec (Spec.Validate, Store.Create do).
func DecodeSpec(data []byte) (Spec, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil || fields == nil {
		return Spec{}, badSpec("spec %s: want a JSON object such as {\"name\": \"nightly\", \"workflow\": \"reconcile\", \"cron\": \"0 2 * * *\"}", clip(data))
	}
	if _, err := dec.Token(); err != io.EOF {
		return Spec{}, badSpec("spec: trailing data after the JSON object")
	}
	for field := range fields {
		switch field {
		case "name", "workflow", "cron", "time_zone", "input", "overlap", "catch_up", "catch_up_window", "paused":
		default:
			return Spec{}, badSpec("spec field %q: unknown; the fields are name, workflow, cron, time_zone, input, overlap, catch_up, catch_up_window and paused", field)
		}
	}
	var sp Spec
	if err := json.Unmarshal(data, &sp); err != nil {
		if errors.Is(err, ErrBadSpec) {
			return Spec{}, err
		}
		return Spec{}, badSpec("spec: %v", err)
	}
	return sp, nil
}
