package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/transition"
)

// What Expire did.
const (
	ExpireNone      = transition.ExpireNone      // nothing due (decided, or the deadline moved)
	ExpireRejected  = transition.ExpireRejected  // the policy rejected; the step runs again with it
	ExpireEscalated = transition.ExpireEscalated // the request moved to another group with a new TTL
	ExpireReminded  = transition.ExpireReminded  // a reminder went out; the TTL starts again
	ExpireWoke      = transition.ExpireWoke      // a durable timer fired
	ExpireSignal    = transition.ExpireSignal    // a signal wait expired; the step runs again
)

// ExpireResult says what Expire did and when the run is due next (zero
// when it no longer is).
type ExpireResult = transition.Expiry

// Reminder is the body of a reminder event, published on
// durable.events.<workflow>.reminder for whoever notifies the approvers.
type Reminder = transition.Reminder

// Expire applies the policy of a wait whose deadline passed at now: wake a
// timer, or for an approval reject, escalate or remind. The change is a
// compare-and-set on the run, so however many schedulers call it for the
// same deadline, the policy is applied once. A run the scheduler expired
// whose step message may have been lost (nothing changed it since) gets
// that message again, under the same id. ExpireMany does the same for
// many runs at once.
func (c *Client) Expire(ctx context.Context, id string, now time.Time) (ExpireResult, error) {
	o := c.ExpireMany(ctx, []string{id}, now)[0]
	return o.ExpireResult, o.Err
}

// expiry is an expiry applied to the run record, and what it owes.
type expiry struct {
	res    ExpireResult
	stored checkpoint.Run // the run as stored, after the change if any
	// changed: the run's status changed, which a status event reports.
	changed bool
	// owed is the step or reminder message the change owes, if any.
	owed transition.Command
	err  error
}

// applyExpiry reads run id and applies transition.Expire to it at now,
// storing the change by compare-and-set: a decision or another scheduler
// that changed the run meanwhile makes it look again.
func (c *Client) applyExpiry(ctx context.Context, id string, now time.Time) expiry {
	for {
		run, err := c.store.GetRun(ctx, id)
		if err != nil {
			return expiry{err: fmt.Errorf("run %s: %w", id, err)}
		}
		r := transition.Apply(run, transition.Expire{}, now)
		e := expiry{res: r.Expiry, stored: run}
		for _, cmd := range r.Commands {
			switch cmd.(type) {
			case transition.PublishStatus:
				e.changed = true
			case transition.PublishStep, transition.PublishReminder:
				e.owed = cmd
			}
		}
		if !r.Store {
			return e
		}
		e.stored, err = c.store.UpdateRun(ctx, r.Run)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue // decided or expired by someone else meanwhile: look again
		}
		if err != nil {
			return expiry{err: fmt.Errorf("expire %s: %w", id, err)}
		}
		return e
	}
}

// Repair publishes again what a running run waits for when it made no
// progress after cutoff (its message may have been lost): the step at
// its cursor or, at the join of a fan-out, the branches without a
// checkpoint, or the join once all have one. Progress is the newest of
// the run record's change, a branch commit (branches never move the run
// record) and, on a store that keeps them (checkpoint.Liveness), a
// worker's heartbeat while it runs the step, or the mark a scheduler
// leaves when it repaired (see scheduler.Scheduler.Repair): a
// step that is alive is not published beside itself, and a stuck state
// is repaired once; its next repair comes when no progress followed for
// as long again. Harmless by the step protocol when the step is in fact
// under way. It reports whether it published: a repair of the same state
// by another scheduler has the same message id and is dropped (false),
// as is a repair of a run that is not running or that made progress.
func (c *Client) Repair(ctx context.Context, run checkpoint.Run, cutoff time.Time) (published bool, err error) {
	if run.Status != checkpoint.StatusRunning || run.UpdatedAt.After(cutoff) {
		return false, nil
	}
	lv, _ := c.store.(checkpoint.Liveness)
	progress := run.UpdatedAt
	if lv != nil {
		alive, err := lv.LastAlive(ctx, run.ID)
		if err != nil {
			return false, err
		}
		if alive.After(progress) {
			progress = alive
		}
		if progress.After(cutoff) {
			return false, nil
		}
	}
	// A span of the run's trace: the step published again continues it.
	ctx, span := runSpan(ctx, run, "durable.repair")
	defer func() {
		span.SetAttributes(attribute.Bool("durable.published", published))
		endSpan(span, err)
	}()
	fan, done, err := c.fanOutAt(ctx, run)
	if err != nil {
		return false, err
	}
	for _, cp := range done {
		if cp.At.After(progress) {
			progress = cp.At
		}
	}
	r := transition.Apply(run, transition.Repair{Cutoff: cutoff, Progress: progress, FanOut: fan}, time.Now())
	for _, cmd := range r.Commands {
		switch cmd := cmd.(type) {
		case transition.PublishStep:
			published, err = c.publishNew(ctx, run, cmd.MsgID)
		case transition.PublishFanOut:
			var n int
			n, err = queue.PublishFanOut(ctx, c.js, run, cmd.Checkpoint, done, cmd.Suffix)
			published = n > 0
		}
	}
	return published, err
}

// fanOutAt returns the fan-out whose join is at run's cursor, with its
// committed branches, or nil when the step before the cursor did not fan
// out.
func (c *Client) fanOutAt(ctx context.Context, run checkpoint.Run) (*checkpoint.Checkpoint, []checkpoint.Checkpoint, error) {
	if run.Step < 2 {
		return nil, nil, nil
	}
	cp, err := c.store.Checkpoint(ctx, run.ID, run.Step-1)
	if errors.Is(err, checkpoint.ErrNotFound) || (err == nil && cp.FanOut == nil) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	done, err := c.store.BranchCheckpoints(ctx, run.ID, run.Step, len(cp.FanOut.Branches))
	if err != nil {
		return nil, nil, err
	}
	return &cp, done, nil
}
