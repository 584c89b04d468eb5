package transition

import (
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// ChannelScheduler is the channel of the changes the scheduler makes (an
// expiry's audit entry, approval or signal marker).
const ChannelScheduler = "scheduler"

// What an Expire did (Expiry.Action).
const (
	ExpireNone      = "none"      // nothing due (decided, or the deadline moved)
	ExpireRejected  = "rejected"  // the policy rejected; the step runs again with it
	ExpireEscalated = "escalated" // the request moved to another group with a new TTL
	ExpireReminded  = "reminded"  // a reminder went out; the TTL starts again
	ExpireWoke      = "woke"      // a durable timer fired
	ExpireSignal    = "signal"    // a signal wait expired; the step runs again
)

// Expiry is what an Expire did, and when the run is due next (zero when
// it no longer is).
type Expiry struct {
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

// Expire is the scheduler's: the deadline of the run's wait may have
// passed. A due wait gets its policy: a timer wakes; a signal wait
// resumes its step with an expiry marker; an approval is escalated,
// reminded, or rejected and resumed. A wait not yet due, or gone,
// changes nothing (Expiry.Action is ExpireNone); a run the scheduler's
// expiry resumed and nothing changed since gets its step again under the
// same id, its first publish may have failed.
type Expire struct{}

func (Expire) apply(run checkpoint.Run, now time.Time) Result {
	w := run.Wait
	if run.Status != checkpoint.StatusWaiting || w == nil || w.Kind == checkpoint.WaitChildren {
		// Nothing due; a wait for child runs has no deadline.
		r := Result{Run: run, Expiry: Expiry{Action: ExpireNone}}
		if id := expiredResumeID(run); id != "" {
			r.Commands = []Command{PublishStep{MsgID: id, Again: true,
				Lost: fmt.Sprintf("the step %d the expiry resumed was not published again", run.Step)}}
		}
		return r
	}
	if now.Before(w.Deadline) {
		return Result{Run: run, Expiry: Expiry{Action: ExpireNone, Next: w.Deadline}}
	}
	next := run
	next.UpdatedAt = now
	audit := func(e checkpoint.AuditEntry) {
		e.Step, e.At, e.Channel, e.By = w.Step, now, ChannelScheduler, "scheduler"
		next.Audit = appended(run.Audit, e)
	}
	resume := func(action string, cause queue.Cause) Result {
		next.Status, next.Wait = checkpoint.StatusRunning, nil
		if cause != queue.Wake {
			// A timer's wake is once per sleep: the worker parked the
			// run at the step after it, the cursor is there, and the
			// wake's id (its own cause) is new without a generation.
			next.Step, next.StepName = w.Step, w.StepName
			next.Resumes++
		}
		lost := fmt.Sprintf("expiry stored but step %d was not published; the next pass publishes it again", next.Step)
		return Result{Run: next, Store: true, Resumed: true, Expiry: Expiry{Action: action},
			Commands: []Command{PublishStatus{}, PublishStep{MsgID: queue.ResumeMsgID(next, cause), Lost: lost}}}
	}
	ttl := w.Deadline.Sub(w.Since)
	if ttl <= 0 {
		ttl = time.Minute
	}
	switch {
	case w.Kind == checkpoint.WaitSignal:
		// The step runs again and learns that no signal came in time.
		next.Signals = withExpiryMarker(run, now)
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditExpired, Reason: fmt.Sprintf("no signal %s within %s", w.Name, ttl)})
		return resume(ExpireSignal, queue.Signal)
	case w.Kind == checkpoint.WaitTimer:
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditTimer, Reason: "timer set for " + w.Deadline.Format(time.RFC3339Nano) + " fired"})
		return resume(ExpireWoke, queue.Wake)
	case w.OnExpiry == "escalate" && w.EscalateTo != "":
		nw := *w
		nw.Group, nw.EscalateTo, nw.OnExpiry = w.EscalateTo, "", "reject"
		nw.Since, nw.Deadline = now, now.Add(ttl)
		next.Wait = &nw
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditEscalated, Group: nw.Group, PayloadSHA256: w.PayloadSHA256,
			Reason: fmt.Sprintf("no decision by %s within %s; escalated to %s", w.Group, ttl, nw.Group)})
		return Result{Run: next, Store: true, Expiry: Expiry{Action: ExpireEscalated, Next: nw.Deadline}}
	case w.OnExpiry == "remind" && w.Reminders > 0:
		nw := *w
		nw.Reminders--
		nw.Since, nw.Deadline = now, now.Add(ttl)
		next.Wait = &nw
		audit(checkpoint.AuditEntry{Kind: checkpoint.AuditReminded, Group: w.Group, PayloadSHA256: w.PayloadSHA256,
			Reason: fmt.Sprintf("no decision by %s within %s; reminder sent, %d left", w.Group, ttl, nw.Reminders)})
		rem := Reminder{RunID: run.ID, Workflow: run.Workflow, Step: w.Step, Group: w.Group, PayloadSHA256: w.PayloadSHA256, Deadline: nw.Deadline, Left: nw.Reminders}
		return Result{Run: next, Store: true, Expiry: Expiry{Action: ExpireReminded, Next: nw.Deadline},
			Commands: []Command{PublishReminder{MsgID: queue.ReminderMsgID(run, w.Step, nw.Reminders), Reminder: rem}}}
	}
	reason := fmt.Sprintf("expired: no decision by %s within %s", w.Group, ttl)
	next.Approvals = appended(run.Approvals, checkpoint.Approval{
		Step: w.Step, By: "scheduler", At: now, Decision: checkpoint.DecisionRejected, Channel: ChannelScheduler,
		PayloadSHA256: w.PayloadSHA256, Payload: w.Payload, Reason: reason,
	})
	audit(checkpoint.AuditEntry{Kind: checkpoint.AuditExpired, Group: w.Group, Decision: checkpoint.DecisionRejected, PayloadSHA256: w.PayloadSHA256, Reason: reason})
	return resume(ExpireRejected, queue.Resume)
}

// withExpiryMarker is run's signals with the marker of its signal wait's
// expiry at now, which the step reads as "no signal came in time". One
// marker per name is enough: an older one no step read yet says the
// same.
func withExpiryMarker(run checkpoint.Run, now time.Time) []checkpoint.Signal {
	w := run.Wait
	out := make([]checkpoint.Signal, 0, len(run.Signals)+1)
	for _, s := range run.Signals {
		if !s.Expired || s.Name != w.Name {
			out = append(out, s)
		}
	}
	return append(out, checkpoint.Signal{
		// ':' is in no caller's id (checkpoint.ValidID): a marker's id
		// cannot collide with a signal's.
		Name: w.Name, ID: fmt.Sprintf("expired:%d:%d", w.Step, run.Resumes), Expired: true, At: now, By: "scheduler", Channel: ChannelScheduler,
	})
}

// expiredResumeID returns the message id of the step that the scheduler's
// expiry of run resumed, if nothing changed the run since (its last audit
// entry is that expiry, at its step, as its last update): the first
// publish may have failed, its entry left claimed for a later pass to
// find it so. Empty when there is nothing to publish again.
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
