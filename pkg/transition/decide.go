package transition

import (
	"fmt"
	"slices"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// Decide is a decision on a run parked for approval: it records the
// decision and resumes the run at the parked step, a generation later.
type Decide struct {
	// Step, when not 0, must be the parked step (ErrWrongStep).
	Step int
	// PayloadSHA256, when set, must be the pending payload's
	// (ErrStaleHash).
	PayloadSHA256 string
	// Groups, when not nil, must hold the wait's group (ErrForbidden).
	Groups []string
	// FourEyes refuses a decider who started the run (ErrForbidden).
	FourEyes bool
	// Reject rejects; otherwise the decision approves.
	Reject              bool
	By, Channel, Reason string
}

func (d Decide) apply(run checkpoint.Run, now time.Time) Result {
	refuse := func(err error) Result { return Result{Run: run, Err: err} }
	w := run.Wait
	switch {
	case run.Status == checkpoint.StatusWaiting && w != nil && w.Kind == checkpoint.WaitTimer:
		return refuse(fmt.Errorf("run %s sleeps until %s (a timer, not an approval): %w", run.ID, w.Deadline.Format(time.RFC3339), ErrNotWaiting))
	case run.Status == checkpoint.StatusWaiting && w != nil && !w.IsApproval():
		return refuse(fmt.Errorf("run %s waits for its %s, not an approval (durable runs show %s says what it waits for): %w", run.ID, waitWhat(w), run.ID, ErrNotWaiting))
	case run.Status != checkpoint.StatusWaiting || w == nil:
		msg := fmt.Sprintf("run %s is %s at step %d", run.ID, run.Status, run.Step)
		if n := len(run.Approvals); n > 0 {
			a := run.Approvals[n-1]
			msg += fmt.Sprintf("; last decision: %s by %s at %s", a.Decision, a.By, a.At.Format(time.RFC3339))
		}
		r := refuse(fmt.Errorf("%s: %w", msg, ErrNotWaiting))
		r.Commands = owedResume(run)
		return r
	case d.Step != 0 && d.Step != w.Step:
		return refuse(fmt.Errorf("run %s waits at step %d, the decision names step %d: %w", run.ID, w.Step, d.Step, ErrWrongStep))
	case d.PayloadSHA256 != "" && d.PayloadSHA256 != w.PayloadSHA256:
		return refuse(fmt.Errorf("run %s: pending payload is %s, not %s: %w", run.ID, w.PayloadSHA256, d.PayloadSHA256, ErrStaleHash))
	case d.Groups != nil && !slices.Contains(d.Groups, w.Group):
		return refuse(fmt.Errorf("run %s waits for group %s; %s is in %v: %w", run.ID, w.Group, d.By, d.Groups, ErrForbidden))
	case d.FourEyes && run.StartedBy != "" && run.StartedBy == d.By:
		return refuse(fmt.Errorf("run %s was started by %s, who may not also approve it (four-eyes rule): %w", run.ID, d.By, ErrForbidden))
	}
	decision := checkpoint.DecisionApproved
	if d.Reject {
		decision = checkpoint.DecisionRejected
	}
	next := run
	next.Approvals = appended(run.Approvals, checkpoint.Approval{
		Step: w.Step, By: d.By, At: now, Decision: decision, Channel: d.Channel,
		PayloadSHA256: w.PayloadSHA256, Payload: w.Payload, Reason: d.Reason,
	})
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: checkpoint.AuditDecision, Step: w.Step, At: now, By: d.By, Channel: d.Channel,
		Group: w.Group, Decision: decision, PayloadSHA256: w.PayloadSHA256, Reason: d.Reason,
	})
	next.Status, next.Step, next.StepName = checkpoint.StatusRunning, w.Step, w.StepName
	next.Wait = nil
	next.Resumes++
	next.UpdatedAt = now
	return Result{Run: next, Store: true, Resumed: true, Commands: []Command{
		PublishStatus{},
		PublishStep{MsgID: queue.ResumeMsgID(next, queue.Resume),
			Lost: fmt.Sprintf("decision recorded but the resume of step %d was not published; deciding again republishes it", next.Step)},
	}}
}

// owedResume is the resume a decided run still owes: a run running at
// the step its last decision was on, unchanged since the decision, may
// have lost the first publish after the decision was stored. Within the
// dedupe window the publish is dropped; later, the step protocol ignores
// it unless the run still waits for that step. A run changed since (a
// signal resumed it again, a generation later) owes nothing: the resume
// under its generation was never minted, and would run the step twice
// (TestModel, seed 98).
func owedResume(run checkpoint.Run) []Command {
	n := len(run.Approvals)
	if run.Status != checkpoint.StatusRunning || n == 0 || run.Approvals[n-1].Step != run.Step || run.UpdatedAt.After(run.Approvals[n-1].At) {
		return nil
	}
	return []Command{PublishStep{MsgID: queue.ResumeMsgID(run, queue.Resume), Again: true, BestEffort: true}}
}

// waitWhat names what a wait waits for, as an operator reads it.
func waitWhat(w *checkpoint.Wait) string {
	switch w.Kind {
	case checkpoint.WaitTimer:
		return "timer"
	case checkpoint.WaitChildren:
		return "child runs"
	}
	return w.Kind
}
