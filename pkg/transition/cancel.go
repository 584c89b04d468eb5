package transition

import (
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Cancel stops a running or waiting run. A step in flight is discarded
// at its commit; the run's live children are cancelled after it, and its
// parent is told it ended.
type Cancel struct{ By, Channel string }

func (c Cancel) apply(run checkpoint.Run, now time.Time) Result {
	if run.Status.Terminal() {
		r := Result{Run: run, Err: fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrNotActive)}
		if run.Status == checkpoint.StatusCancelled {
			// A cascade cut short by a crash is finished by cancelling again.
			r.Commands = []Command{CancelChildren(c)}
		}
		return r
	}
	next := run
	next.Status, next.Wait, next.UpdatedAt = checkpoint.StatusCancelled, nil, now
	next.Error = "cancelled by " + c.By
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: checkpoint.AuditCancelled, Step: run.Step, At: now, By: c.By, Channel: c.Channel,
	})
	return Result{Run: next, Store: true, Commands: []Command{PublishStatus{}, CancelChildren(c), NotifyParent{}}}
}

// MaxRefusals bounds the refused-approval entries kept on one run, so a
// misbehaving sender cannot grow a run record without limit.
const MaxRefusals = 50

// Refuse records a refused approval (wrong hash, step or group, or a run
// not waiting) in the run's audit; the decision state does not change.
// Past MaxRefusals it changes nothing.
type Refuse struct{ Entry checkpoint.AuditEntry }

func (f Refuse) apply(run checkpoint.Run, now time.Time) Result {
	// Older entries leave the record (checkpoint.Run.Spill): the count is
	// kept beside them. A record written before it was kept has its
	// refusals on the audit.
	n := 0
	for _, a := range run.Audit {
		if a.Kind == checkpoint.AuditRefused {
			n++
		}
	}
	n = max(n, run.Refusals)
	if n >= MaxRefusals {
		return Result{Run: run}
	}
	e := f.Entry
	e.Kind = checkpoint.AuditRefused
	if e.At.IsZero() {
		e.At = now
	}
	next := run
	next.Audit = appended(run.Audit, e)
	next.Refusals = n + 1
	return Result{Run: next, Store: true}
}
