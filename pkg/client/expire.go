package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// What Expire did.
const (
	ExpireNone      = "none"      // nothing due (decided, or the deadline moved)
	ExpireRejected  = "rejected"  // the policy rejected; the step runs again with it
	ExpireEscalated = "escalated" // the request moved to another group with a new TTL
	ExpireReminded  = "reminded"  // a reminder went out; the TTL starts again
	ExpireWoke      = "woke"      // a durable timer fired
	ExpireSignal    = "signal"    // a signal wait expired; the step runs again
)

// ExpireResult says what Expire did and when the run is due next (zero
// when it no longer is).
type ExpireResult struct {
	Action string
	Next   time.Time
}

// Reminder is the body of a reminder event, published on
// durable.events.<workflow>.reminder for whoever notifies the approvers.
type Reminder struct {
	RunID         string    `json:"run_id"`
	Workflow      string    `json:"workflow"`
	Step          int       `json:"step"`
	Group         string    `json:"group"`
	PayloadSHA256 string    `json:"payload_sha256"`
	Deadline      time.Time `json:"deadline"`
	Left          int       `json:"reminders_left"`
}

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

// owed is what an expiry owes the world once the run record holds it.
type owed struct {
	// stepID, when set, is the message id under which the step at the
	// run's cursor is published: the resumed or woken step.
	stepID string
	// reminder, when set, is published as a reminder event under
	// reminderID.
	reminder   *Reminder
	reminderID string
}

// expiry is an expiry applied to the run record, and what it owes.
type expiry struct {
	res    ExpireResult
	stored checkpoint.Run // the run as stored, after the change if any
	// changed: the run's status changed, which a status event reports.
	changed bool
	owed    owed
	err     error
}

// applyExpiry reads run id and, if its wait is due at now, stores the
// run after its policy, by compare-and-set: a decision or another
// scheduler that changed the run meanwhile makes it look again.
func (c *Client) applyExpiry(ctx context.Context, id string, now time.Time) expiry {
	for {
		run, err := c.store.GetRun(ctx, id)
		if err != nil {
			return expiry{err: fmt.Errorf("run %s: %w", id, err)}
		}
		w := run.Wait
		if run.Status != checkpoint.StatusWaiting || w == nil || w.Kind == checkpoint.WaitChildren {
			// Nothing due; a wait for child runs has no deadline.
			return expiry{res: ExpireResult{Action: ExpireNone}, stored: run, owed: owed{stepID: expiredResumeID(run)}}
		}
		if now.Before(w.Deadline) {
			return expiry{res: ExpireResult{Action: ExpireNone, Next: w.Deadline}, stored: run}
		}
		res, next, o := expireRun(run, now)
		stored, err := c.store.UpdateRun(ctx, next)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue // decided or expired by someone else meanwhile: look again
		}
		if err != nil {
			return expiry{err: fmt.Errorf("expire %s: %w", id, err)}
		}
		return expiry{res: res, stored: stored, changed: stored.Status != run.Status, owed: o}
	}
}

// expiredResumeID returns the message id of the step that the scheduler's
// expiry of run resumed, if nothing changed the run since (its last audit
// entry is that expiry, at its step, as its last update): the first
// publish may have failed, its entry left claimed for a later pass to
// find it so. The id is the first publish's, so the stream drops the copy
// within its duplicate window, and the step protocol a stale one after
// it. Empty when there is nothing to publish again.
func expiredResumeID(run checkpoint.Run) string {
	n := len(run.Audit)
	if run.Status != checkpoint.StatusRunning || n == 0 {
		return ""
	}
	e := run.Audit[n-1]
	if e.Channel != ChannelScheduler || e.Step != run.Step || !e.At.Equal(run.UpdatedAt) {
		return ""
	}
	switch {
	case e.Kind == checkpoint.AuditTimer:
		return queue.ResumeMsgID(run, queue.Wake)
	case e.Kind != checkpoint.AuditExpired:
		return ""
	}
	if s := run.Signals; len(s) > 0 && s[len(s)-1].Expired && s[len(s)-1].At.Equal(e.At) {
		return queue.ResumeMsgID(run, queue.Signal)
	}
	return queue.ResumeMsgID(run, queue.Resume)
}

// expireRun computes the run after its wait expired, and what it owes
// once stored (the ids depend on nothing the store changes).
func expireRun(run checkpoint.Run, now time.Time) (ExpireResult, checkpoint.Run, owed) {
	w := *run.Wait
	next := run
	next.UpdatedAt = now
	audit := func(e checkpoint.AuditEntry) {
		e.Step, e.At, e.Channel, e.By = w.Step, now, ChannelScheduler, "scheduler"
		next.Audit = append(append([]checkpoint.AuditEntry(nil), run.Audit...), e)
	}
	ttl := w.Deadline.Sub(w.Since)
	if ttl <= 0 {
		ttl = time.Minute
	}
	if w.Kind == checkpoint.WaitSignal {
		// The step runs again and learns that no signal came in time.
		reason := fmt.Sprintf("no signal %s within %s", w.Name, ttl)
		// One marker per name is enough: an older one no step read yet
		// says the same.
		next.Signals = nil
		for _, s := range run.Signals {
			if !s.Expired || s.Name != w.Name {
				next.Signals = append(next.Signals, s)
			}
		}
		next.Signals = append(next.Signals, checkpoint.Signal{
			// ':' is in no caller's id (checkpoint.ValidID): a marker's id
			// cannot collide with a signal's.
			Name: w.Name, ID: fmt.Sprintf("expired:%d:%d", w.Step, run.Resumes), Expired: true, At: now, By: "scheduler", Channel: ChannelScheduler,
		})
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditExpired, Reason: reason})
		next.Status, next.Step, next.StepName, next.Wait = checkpoint.StatusRunning, w.Step, w.StepName, nil
		next.Resumes++
		return ExpireResult{Action: ExpireSignal}, next, owed{stepID: queue.ResumeMsgID(next, queue.Signal)}
	}
	if w.Kind == checkpoint.WaitTimer {
		next.Status, next.Wait = checkpoint.StatusRunning, nil
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditTimer, Reason: "timer set for " + w.Deadline.Format(time.RFC3339Nano) + " fired"})
		return ExpireResult{Action: ExpireWoke}, next, owed{stepID: queue.ResumeMsgID(next, queue.Wake)}
	}
	switch {
	case w.OnExpiry == "escalate" && w.EscalateTo != "":
		nw := w
		nw.Group, nw.EscalateTo, nw.OnExpiry = w.EscalateTo, "", "reject"
		nw.Since, nw.Deadline = now, now.Add(ttl)
		next.Wait = &nw
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditEscalated, Group: nw.Group, PayloadSHA256: w.PayloadSHA256,
			Reason: fmt.Sprintf("no decision by %s within %s; escalated to %s", w.Group, ttl, nw.Group)})
		return ExpireResult{Action: ExpireEscalated, Next: nw.Deadline}, next, owed{}
	case w.OnExpiry == "remind" && w.Reminders > 0:
		nw := w
		nw.Reminders--
		nw.Since, nw.Deadline = now, now.Add(ttl)
		next.Wait = &nw
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditReminded, Group: w.Group, PayloadSHA256: w.PayloadSHA256,
			Reason: fmt.Sprintf("no decision by %s within %s; reminder sent, %d left", w.Group, ttl, nw.Reminders)})
		rem := &Reminder{RunID: run.ID, Workflow: run.Workflow, Step: w.Step, Group: w.Group, PayloadSHA256: w.PayloadSHA256, Deadline: nw.Deadline, Left: nw.Reminders}
		return ExpireResult{Action: ExpireReminded, Next: nw.Deadline}, next,
			owed{reminder: rem, reminderID: queue.ReminderMsgID(run, w.Step, nw.Reminders)}
	}
	reason := fmt.Sprintf("expired: no decision by %s within %s", w.Group, ttl)
	next.Approvals = append(append([]checkpoint.Approval(nil), run.Approvals...), checkpoint.Approval{
		Step: w.Step, By: "scheduler", At: now, Decision: checkpoint.DecisionRejected, Channel: ChannelScheduler,
		PayloadSHA256: w.PayloadSHA256, Payload: w.Payload, Reason: reason,
	})
	audit(checkpoint.AuditEntry{Kind: checkpoint.AuditExpired, Group: w.Group, Decision: checkpoint.DecisionRejected, PayloadSHA256: w.PayloadSHA256, Reason: reason})
	next.Status, next.Step, next.StepName, next.Wait = checkpoint.StatusRunning, w.Step, w.StepName, nil
	next.Resumes++
	return ExpireResult{Action: ExpireRejected}, next, owed{stepID: queue.ResumeMsgID(next, queue.Resume)}
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
	if fan == nil {
		published, err = c.publishNew(ctx, run, queue.RepairMsgID(run, progress))
	} else {
		for _, cp := range done {
			if cp.At.After(progress) {
				progress = cp.At
			}
		}
		if progress.After(cutoff) {
			return false, nil
		}
		var n int
		n, err = queue.PublishFanOut(ctx, c.js, run, *fan, done, queue.RepairSuffix(run, progress))
		published = n > 0
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
