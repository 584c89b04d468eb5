package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// ErrBadSpec: a schedule's spec is invalid. The error names the field and
// the value, e.g. `cron expression "61 * * * *": end of range (61) above
// maximum (59): 61` or `time zone "Mars/Base": unknown`.
var ErrBadSpec = errors.New("bad schedule")

// specError is an ErrBadSpec whose text is only what was wrong: a CLI
// prints it as is.
type specError struct{ msg string }

func (e *specError) Error() string        { return e.msg }
func (e *specError) Is(target error) bool { return target == ErrBadSpec }

func badSpec(format string, args ...any) error {
	return &specError{msg: fmt.Sprintf(format, args...)}
}

// Overlap says what a fire does while the run the schedule started last
// has not ended (running or waiting).
type Overlap string

const (
	// OverlapSkip records the fire as skipped and starts nothing. The
	// default: a run that outlasts its period is not joined by a second.
	OverlapSkip Overlap = "skip"
	// OverlapAllow starts the new run beside the previous one.
	OverlapAllow Overlap = "allow"
	// OverlapCancelPrevious cancels the previous run, then starts the new one.
	OverlapCancelPrevious Overlap = "cancel-previous"
)

// CatchUp says which fires, missed while no firer ran (an outage of the
// schedulers), are owed when one runs again. Only fires within the
// schedule's catch-up window are ever owed.
type CatchUp string

const (
	// CatchUpLast starts only the newest missed fire within the window.
	// The default: a job that reconciles the state of the world needs to
	// run once after an outage, not once per period missed.
	CatchUpLast CatchUp = "last"
	// CatchUpAll starts every missed fire within the window, oldest
	// first (each under the overlap policy).
	CatchUpAll CatchUp = "all"
)

// Bounds of a spec.
const (
	// MaxNameLen is the longest schedule name: its fire ids (FireID) add
	// at most 17 characters and stay within the 128 of a run id.
	MaxNameLen = 100
	// DefaultCatchUpWindow is the catch-up window of a spec that sets none:
	// an outage shorter than a day still gets its missed fire.
	DefaultCatchUpWindow = 24 * time.Hour
	// MaxInputBytes bounds a schedule's run input (compact JSON).
	MaxInputBytes = 64 << 10
)

// Bounds of the catch-up window: at least a minute, so that a firer
// called every few seconds never misses a fire for lateness; at most a
// week, which bounds the fires CatchUpAll owes.
const (
	minCatchUpWindow = time.Minute
	maxCatchUpWindow = 7 * 24 * time.Hour
)

// Spec is what a schedule is made of: which workflow to start, when, and
// with what input. Zero values take the defaults documented.
type Spec struct {
	// Name identifies the schedule: 1-MaxNameLen letters, digits, '-' or
	// '_'. Its runs have ids FireID(Name, fire time).
	Name string `json:"name"`
	// Workflow to start, as registered by the workers.
	Workflow string `json:"workflow"`
	// Cron is a standard 5-field expression (minute hour day-of-month
	// month day-of-week, e.g. "0 2 * * *"; names like MON or JAN, ranges,
	// lists and steps as in crontab(5)), or one of @yearly (@annually),
	// @monthly, @weekly, @daily (@midnight), @hourly. Fires are on the
	// minute; there is no seconds field, and no @every: fire times follow
	// the calendar, never the time a schedule was created.
	Cron string `json:"cron"`
	// TimeZone is the IANA name of the zone the expression reads its
	// clock in, e.g. "Europe/Berlin". Default UTC. Around a change of the
	// clock (daylight saving time) each matching wall-clock time fires
	// once: a time that occurs twice fires at its first occurrence, and a
	// time the clock skips fires when it would have been had the clock not
	// moved (02:30 on the spring-forward day in Berlin fires at 03:30
	// CEST). So a daily schedule fires once every day; an every-N-minutes
	// schedule fires nothing in the repeated hour of an autumn change:
	// use UTC for intervals.
	TimeZone string `json:"time_zone,omitempty"`
	// Input of each run: a JSON object. Default {}.
	Input json.RawMessage `json:"input,omitempty"`
	// Overlap policy. Default OverlapSkip.
	Overlap Overlap `json:"overlap,omitempty"`
	// CatchUp policy. Default CatchUpLast.
	CatchUp CatchUp `json:"catch_up,omitempty"`
	// CatchUpWindow: a fire is owed while it is at most this old; one
	// older, missed while no firer ran, is dropped. From a minute to a
	// week. Default DefaultCatchUpWindow.
	CatchUpWindow time.Duration `json:"-"`
	// Paused: the schedule fires nothing until resumed (Store.Resume),
	// and owes no fire from the time it was paused.
	Paused bool `json:"paused,omitempty"`
}

// specJSON is Spec as JSON: the window as a Go duration ("24h0m0s").
type specJSON struct {
	specAlias
	CatchUpWindow string `json:"catch_up_window,omitempty"`
}

type specAlias Spec

// MarshalJSON writes the catch-up window as a Go duration string.
func (s Spec) MarshalJSON() ([]byte, error) {
	j := specJSON{specAlias: specAlias(s)}
	if s.CatchUpWindow != 0 {
		j.CatchUpWindow = s.CatchUpWindow.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Spec) UnmarshalJSON(b []byte) error {
	var j specJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Spec(j.specAlias)
	if j.CatchUpWindow != "" {
		d, err := time.ParseDuration(j.CatchUpWindow)
		if err != nil {
			return badSpec("catch-up window %q: %v", j.CatchUpWindow, err)
		}
		s.CatchUpWindow = d
	}
	return nil
}

// withDefaults is s with every default spelled out, so that a stored
// schedule keeps its behaviour if a default changes later.
func (s Spec) withDefaults() Spec {
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	if s.Overlap == "" {
		s.Overlap = OverlapSkip
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpLast
	}
	if s.CatchUpWindow == 0 {
		s.CatchUpWindow = DefaultCatchUpWindow
	}
	if len(bytes.TrimSpace(s.Input)) == 0 {
		s.Input = json.RawMessage(`{}`)
	}
	return s
}

// Validate reports the first thing wrong with s as an error wrapping
// ErrBadSpec that names the field and its value.
func (s Spec) Validate() error {
	_, err := s.normalize()
	return err
}

// normalize validates s and returns it with its defaults spelled out
// and its input compacted: what a store keeps.
func (s Spec) normalize() (Spec, error) {
	if err := s.nameErr(); err != nil {
		return s, err
	}
	if !steps.ValidName(s.Workflow) {
		return s, badSpec("workflow %q: a workflow name is 1-64 letters, digits, '-' or '_'", s.Workflow)
	}
	s = s.withDefaults()
	c, err := parse(s.Cron, s.TimeZone)
	if err != nil {
		return s, err
	}
	if c.next(time.Now()).IsZero() {
		return s, badSpec("cron expression %q: never fires (no matching date within 5 years)", s.Cron)
	}
	switch s.Overlap {
	case OverlapSkip, OverlapAllow, OverlapCancelPrevious:
	default:
		return s, badSpec("overlap policy %q: use %s, %s or %s", s.Overlap, OverlapSkip, OverlapAllow, OverlapCancelPrevious)
	}
	switch s.CatchUp {
	case CatchUpLast, CatchUpAll:
	default:
		return s, badSpec("catch-up policy %q: use %s or %s", s.CatchUp, CatchUpLast, CatchUpAll)
	}
	if s.CatchUpWindow < minCatchUpWindow || s.CatchUpWindow > maxCatchUpWindow {
		return s, badSpec("catch-up window %s: use %s to %s", s.CatchUpWindow, minCatchUpWindow, maxCatchUpWindow)
	}
	in, err := compactObject(s.Input)
	if err != nil {
		return s, err
	}
	s.Input = in
	return s, nil
}

func (s Spec) nameErr() error {
	if !checkpoint.ValidID(s.Name) || len(s.Name) > MaxNameLen {
		return badSpec("schedule name %q: use 1-%d letters, digits, '-' or '_'", s.Name, MaxNameLen)
	}
	return nil
}

// compactObject checks that in is a JSON object of at most MaxInputBytes
// and compacts it.
func compactObject(in json.RawMessage) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(in, &obj); err != nil || obj == nil {
		why := "null"
		if err != nil {
			why = err.Error()
		}
		return nil, badSpec("input %s: must be a JSON object: %s", clip(in), why)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, in); err != nil {
		return nil, badSpec("input %s: %v", clip(in), err)
	}
	if buf.Len() > MaxInputBytes {
		return nil, badSpec("input of %d bytes: at most %d", buf.Len(), MaxInputBytes)
	}
	return buf.Bytes(), nil
}

// clip quotes the start of a value for an error message.
func clip(b []byte) string {
	const max = 40
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}
