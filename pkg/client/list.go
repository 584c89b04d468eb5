package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// DefaultStuckAfter is how long a running run may go without its record
// changing (every commit, park and decision changes it) before it counts
// as stuck. It is the scheduler's --stuck-after default: past it the
// scheduler publishes the run's step again, so a run still stuck well past
// it is one that repair did not move.
const DefaultStuckAfter = 15 * time.Minute

// ErrBadFilter: a list filter contradicts itself or has a negative age.
var ErrBadFilter = errors.New("bad run filter")

// IsStuck reports whether run is stuck at now: running, and its record
// (updated by every commit) older than after. A zero or negative after
// means DefaultStuckAfter.
func IsStuck(run checkpoint.Run, now time.Time, after time.Duration) bool {
	if after <= 0 {
		after = DefaultStuckAfter
	}
	return run.Status == checkpoint.StatusRunning && now.Sub(run.UpdatedAt) > after
}

// IsPastTTL reports whether run is waiting with its deadline (approval TTL
// or timer) already past at now: the scheduler should have expired,
// escalated, reminded or woken it.
func IsPastTTL(run checkpoint.Run, now time.Time) bool {
	return run.Status == checkpoint.StatusWaiting && run.Wait != nil && !run.Wait.Deadline.IsZero() && now.After(run.Wait.Deadline)
}

// ListFilter selects runs for List. Zero values match everything.
type ListFilter struct {
	Status   checkpoint.Status
	Workflow string
	// OlderThan and NewerThan bound the run's age (since CreatedAt).
	OlderThan, NewerThan time.Duration
	// PastTTL keeps waiting runs whose deadline has passed (IsPastTTL).
	PastTTL bool
	// Stuck keeps stuck running runs (IsStuck with StuckAfter).
	Stuck bool
	// StuckAfter is the stuck threshold; default DefaultStuckAfter.
	StuckAfter time.Duration
	// Now is the time ages are measured at; default time.Now().
	Now time.Time
}

func (f ListFilter) validate() error {
	if f.Status != "" && !f.Status.Valid() {
		return fmt.Errorf("%w: unknown status %q (running, waiting, completed, failed, cancelled, dead)", ErrBadFilter, f.Status)
	}
	if f.OlderThan < 0 || f.NewerThan < 0 || f.StuckAfter < 0 {
		return fmt.Errorf("%w: durations must not be negative", ErrBadFilter)
	}
	if f.PastTTL && f.Stuck {
		return fmt.Errorf("%w: a run past its TTL is waiting and a stuck run is running: choose one", ErrBadFilter)
	}
	if f.PastTTL && f.Status != "" && f.Status != checkpoint.StatusWaiting {
		return fmt.Errorf("%w: runs past their TTL are waiting, not %s", ErrBadFilter, f.Status)
	}
	if f.Stuck && f.Status != "" && f.Status != checkpoint.StatusRunning {
		return fmt.Errorf("%w: stuck runs are running, not %s", ErrBadFilter, f.Status)
	}
	return nil
}

// List returns every run matching f, oldest first, each marked past_ttl
// or stuck when it is. It reads every run of f's status (or of every
// status), so it costs the live work for a live status and the history
// the store keeps otherwise: listings for people page with ListPage.
func (c *Client) List(ctx context.Context, f ListFilter) ([]RunSummary, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	if f.Now.IsZero() {
		f.Now = time.Now()
	}
	status := f.Status
	switch {
	case f.PastTTL:
		status = checkpoint.StatusWaiting
	case f.Stuck:
		status = checkpoint.StatusRunning
	}
	runs, err := c.store.ListRuns(ctx, checkpoint.Filter{Status: status, Workflow: f.Workflow})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out := make([]RunSummary, 0, len(runs))
	for _, r := range runs {
		if s, ok := f.keep(r); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// RunsPage is one page of ListPage, newest first.
type RunsPage struct {
	Runs []RunSummary
	// Next is where the next page starts (ListPage's after); zero after
	// the last page.
	Next checkpoint.Cursor
}

// ListPage returns up to limit (1 to checkpoint.MaxPageLimit) runs
// matching f that come after the key after, newest first: by creation,
// or, with a status (PastTTL and Stuck imply one), by when the runs took
// it (see checkpoint.Cursor). It reads the store's index a page at a
// time, so it costs the runs it reads: those it returns, and those f's
// age, TTL and stuck filters drop on the way.
func (c *Client) ListPage(ctx context.Context, f ListFilter, limit int, after checkpoint.Cursor) (RunsPage, error) {
	if err := f.validate(); err != nil {
		return RunsPage{}, err
	}
	if limit < 1 || limit > checkpoint.MaxPageLimit {
		return RunsPage{}, fmt.Errorf("%w: limit %d: want 1-%d", ErrBadFilter, limit, checkpoint.MaxPageLimit)
	}
	if f.Now.IsZero() {
		f.Now = time.Now()
	}
	q := checkpoint.PageQuery{Status: f.Status, Workflow: f.Workflow, After: after}
	switch {
	case f.PastTTL:
		q.Status = checkpoint.StatusWaiting
	case f.Stuck:
		q.Status = checkpoint.StatusRunning
	}
	var out RunsPage
	for {
		// Ask for what is missing only, so the page ends on the last
		// run read and its Next is where this listing goes on.
		q.Limit = limit - len(out.Runs)
		page, err := c.store.PageRuns(ctx, q)
		if err != nil {
			return RunsPage{}, fmt.Errorf("list runs: %w", err)
		}
		for _, r := range page.Runs {
			if s, ok := f.keep(r); ok {
				out.Runs = append(out.Runs, s)
			}
		}
		out.Next = page.Next
		if page.Next.IsZero() || len(out.Runs) == limit {
			return out, nil
		}
		// A listing runs newest first by a time no earlier than each
		// run's creation: past NewerThan, every run after is older.
		if f.NewerThan > 0 && f.Now.Sub(page.Next.At) >= f.NewerThan {
			out.Next = checkpoint.Cursor{}
			return out, nil
		}
		if ctx.Err() != nil {
			return RunsPage{}, ctx.Err()
		}
		q.After = page.Next
	}
}

// keep reports whether r passes f's age, TTL and stuck filters, and
// summarizes it.
func (f ListFilter) keep(r checkpoint.Run) (RunSummary, bool) {
	age := f.Now.Sub(r.CreatedAt)
	pastTTL, stuck := IsPastTTL(r, f.Now), IsStuck(r, f.Now, f.StuckAfter)
	if (f.OlderThan > 0 && age <= f.OlderThan) || (f.NewerThan > 0 && age >= f.NewerThan) ||
		(f.PastTTL && !pastTTL) || (f.Stuck && !stuck) {
		return RunSummary{}, false
	}
	s := Summarize([]checkpoint.Run{r})[0]
	s.PastTTL, s.Stuck = pastTTL, stuck
	return s, true
}

// Counts reads the store's counters of runs per status, in all and per
// workflow, without reading any run.
func (c *Client) Counts(ctx context.Context) (checkpoint.RunCounts, error) {
	counts, err := c.store.CountRuns(ctx)
	if err != nil {
		return checkpoint.RunCounts{}, fmt.Errorf("count runs: %w", err)
	}
	return counts, nil
}
