package flow

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBadLimit: a limit's name or rate is invalid. The error names the
// field and the value, e.g. `rate "10/d": unknown period "d" (use s, m, h
// or a Go duration such as 10s)`.
var ErrBadLimit = errors.New("bad limit")

// limitError is an ErrBadLimit whose text is only what was wrong: a CLI
// prints it as is.
type limitError struct{ msg string }

func (e *limitError) Error() string        { return e.msg }
func (e *limitError) Is(target error) bool { return target == ErrBadLimit }

func badLimit(format string, args ...any) error {
	return &limitError{msg: fmt.Sprintf(format, args...)}
}

// Bounds of a Rate. One token per microsecond is far beyond what a
// compare-and-set on one KV key sustains; a burst that takes longer than
// a day to refill is a mistake, and its arithmetic would overflow.
const (
	minInterval   = time.Microsecond
	maxPer        = 24 * time.Hour
	maxBurst      = 1_000_000
	maxRefillTime = 24 * time.Hour
)

// Rate is a limit's pace: N tokens per Per, of which Burst may be taken at
// once after a quiet spell. Tokens then come back one every Per/N, up to
// Burst. So over any span d at most Burst + N×d/Per are taken.
type Rate struct {
	// N tokens per Per; at least 1.
	N int
	// Per is the period, more than 0 and at most 24h.
	Per time.Duration
	// Burst is how many tokens may be taken at once: at least 1 (1 is a
	// steady pace with no burst), at most 1,000,000, and refilled
	// (Burst×Per/N) within 24h.
	Burst int
}

// ParseRate reads the command line's form of a rate, "N/period": "10/s",
// "600/m", "1000/h", or a Go duration as the period ("5/10s"). Its Burst
// is 1 (a steady pace); set it after. The error wraps ErrBadLimit.
func ParseRate(s string) (Rate, error) {
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, badLimit("rate %q: use N/period, e.g. 10/s, 600/m or 1000/h", s)
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return Rate{}, badLimit("rate %q: %q is not a whole number", s, num)
	}
	r := Rate{N: n, Burst: 1}
	switch per {
	case "s":
		r.Per = time.Second
	case "m":
		r.Per = time.Minute
	case "h":
		r.Per = time.Hour
	default:
		d, err := time.ParseDuration(per)
		if err != nil {
			return Rate{}, badLimit("rate %q: unknown period %q (use s, m, h or a Go duration such as 10s)", s, per)
		}
		r.Per = d
	}
	if err := r.Validate(); err != nil {
		return Rate{}, badLimit("rate %q: %v", s, err)
	}
	return r, nil
}

// Validate checks the bounds documented on Rate; the error wraps
// ErrBadLimit and names the field and value.
func (r Rate) Validate() error {
	switch {
	case r.N < 1:
		return badLimit("N %d: a rate allows at least 1 token per period", r.N)
	case r.Per <= 0 || r.Per > maxPer:
		return badLimit("period %s: use more than 0 and at most %s", r.Per, maxPer)
	case r.Per/time.Duration(r.N) < minInterval:
		return badLimit("rate %d per %s: more than one token per %s", r.N, r.Per, minInterval)
	case r.Burst < 1 || r.Burst > maxBurst:
		return badLimit("burst %d: use 1 to %d", r.Burst, maxBurst)
	case time.Duration(r.Burst) > maxRefillTime/r.interval():
		return badLimit("burst %d at %d per %s: refilling it takes more than %s", r.Burst, r.N, r.Per, maxRefillTime)
	}
	return nil
}

// String is the rate in ParseRate's form, then its burst: "10/s burst 5".
func (r Rate) String() string {
	per := r.Per.String()
	switch r.Per {
	case time.Second:
		per = "s"
	case time.Minute:
		per = "m"
	case time.Hour:
		per = "h"
	}
	return fmt.Sprintf("%d/%s burst %d", r.N, per, r.Burst)
}

// interval is the emission interval: one token per interval at the
// steady pace.
func (r Rate) interval() time.Duration { return r.Per / time.Duration(r.N) }

// gcra is the generic cell rate algorithm for one token at now, given the
// theoretical arrival time tat (zero: never taken). It returns the new
// tat and 0 when a token is taken, or tat unchanged and how long to wait
// when none is. tat runs ahead of now by the tokens taken faster than the
// steady pace; a token may be taken while that lead stays within the
// burst, Burst×interval.
func gcra(r Rate, tat, now time.Time) (time.Time, time.Duration) {
	t := r.interval()
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(t)
	allowAt := next.Add(-time.Duration(r.Burst) * t)
	if now.Before(allowAt) {
		return tat, allowAt.Sub(now)
	}
	return next, 0
}

// resumeTAT is the tat that makes a limit's next token come at until, and
// the following ones at the steady pace, with no burst: a limit slowed
// down by a provider's rate-limit answer resumes gently.
func resumeTAT(r Rate, until time.Time) time.Time {
	return until.Add(time.Duration(r.Burst-1) * r.interval())
}

// maxNameLen is the longest limit name.
const maxNameLen = 64

// ValidateName checks a limit's name as every method of Store does,
// without a round trip: ErrBadLimit, naming the rule, when it is not 1-64
// letters, digits, '-', '_' or '.' (no '.' first, last or twice in a
// row).
func ValidateName(name string) error { return nameErr(name) }

// nameErr checks a limit's name: 1-64 letters, digits, '-', '_'
// or '.', with no '.' first, last or twice in a row (the name is part of
// a KV key, whose '.' separates tokens).
func nameErr(name string) error {
	ok := name != "" && len(name) <= maxNameLen &&
		name[0] != '.' && name[len(name)-1] != '.' && !strings.Contains(name, "..")
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c == '-' || c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	if !ok {
		return badLimit("limit name %q: use 1-%d letters, digits, '-', '_' or '.' (not first, last or twice in a row)", name, maxNameLen)
	}
	return nil
}
