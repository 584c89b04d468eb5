package transition

import (
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// ErrNotDead: only a dead run can be redriven.
var ErrNotDead = errors.New("run is not dead")

// Redrive puts a dead run back to work at the step it died in, with a
// fresh set of attempts, a generation later. Completed steps are not run
// again and journaled calls are replayed, so effects already made are
// not made twice.
type Redrive struct {
	By, Channel string
	// Before is the checkpoint of the step before the run's cursor, if
	// there is one; checkpoints never change, so the caller reads it
	// before it reads the run. When it started child runs, the redriven
	// run waits for them again (StartChildren); when it fanned out, the
	// branches without a checkpoint run again, or the join
	// (PublishFanOut); otherwise the step at the cursor runs again.
	Before *checkpoint.Checkpoint
}

// StartChildren starts the child runs Checkpoint lists (those that exist
// are left as they are), then resumes the run if they have all ended.
type StartChildren struct{ Checkpoint checkpoint.Checkpoint }

// PublishFanOut publishes what the fan-out committed at Checkpoint waits
// for, the run being at its join: the branches without a checkpoint, or
// the join when all have one. Suffix follows their regular ids
// (queue.PublishFanOut).
type PublishFanOut struct {
	Checkpoint checkpoint.Checkpoint
	Suffix     string
}

func (StartChildren) command() {}
func (PublishFanOut) command() {}

func (d Redrive) apply(run checkpoint.Run, now time.Time) Result {
	if run.Status != checkpoint.StatusDead {
		return Result{Run: run, Err: fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrNotDead)}
	}
	next := run
	next.Status, next.UpdatedAt = checkpoint.StatusRunning, now
	next.Redrives++
	next.RedriveStep = run.Step
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: checkpoint.AuditRedriven, Step: run.Step, At: now, By: d.By, Channel: d.Channel, Reason: "was dead: " + run.Error,
	})
	next.Error, next.FailedBranch = "", 0
	r := Result{Run: next, Store: true, Commands: []Command{PublishStatus{}}}
	before := d.Before
	if before == nil || before.Step != run.Step-1 {
		before = nil // not the step before the cursor: nothing to learn
	}
	switch {
	case before != nil && len(before.Children) > 0:
		// The run waits for its children again; those that could not be
		// started are started now.
		r.Run.Status = checkpoint.StatusWaiting
		r.Run.Wait = &checkpoint.Wait{Kind: checkpoint.WaitChildren, Step: run.Step, StepName: run.StepName, Since: now}
		r.Commands = append(r.Commands, StartChildren{Checkpoint: *before})
	case before != nil && before.FanOut != nil:
		r.Commands = append(r.Commands, PublishFanOut{Checkpoint: *before, Suffix: queue.Redrive.Suffix(next)})
	default:
		r.Commands = append(r.Commands, PublishStep{MsgID: queue.ResumeMsgID(next, queue.Redrive),
			Lost: fmt.Sprintf("run %s set running but its step was not published; the scheduler's stuck-run repair will publish it", run.ID)})
	}
	return r
}

// ChildrenEnded: every child run the run waits for has ended (the caller
// read them after it read the run). The run resumes at its step after
// the one that started them; its generation stays (the children's resume
// is once per start of children).
type ChildrenEnded struct{ Count int }

func (c ChildrenEnded) apply(run checkpoint.Run, now time.Time) Result {
	if run.Status != checkpoint.StatusWaiting || run.Wait == nil || run.Wait.Kind != checkpoint.WaitChildren {
		return Result{Run: run}
	}
	next := run
	next.Status, next.Wait, next.UpdatedAt = checkpoint.StatusRunning, nil, now
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: checkpoint.AuditChildren, Step: run.Step, At: now, Reason: fmt.Sprintf("all %d child runs ended", c.Count),
	})
	return Result{Run: next, Store: true, Resumed: true, Commands: []Command{
		PublishStatus{},
		PublishStep{MsgID: queue.ResumeMsgID(next, queue.Children),
			Lost: fmt.Sprintf("parent %s resumed but its step was not published; the scheduler's repair publishes it", run.ID)},
	}}
}

// Repair is the scheduler's: a running run made no progress since
// Cutoff, so the message it waits for may have been lost. Progress is the
// newest sign of life the caller read besides the run record's own
// change (a worker's heartbeat, a branch's commit, an earlier repair's
// mark); FanOut, when the step before the cursor fanned out, is its
// checkpoint. The step at the cursor is published again, or the
// fan-out's branches without a checkpoint, or its join: under an id of
// the stuck state (the generation and the time of the last progress), so
// one stuck state is repaired once however many schedulers see it, and
// harmless by the step protocol if the step was in fact under way. A run
// not running, or with progress after Cutoff, changes nothing and
// publishes nothing. Repair never stores the run.
type Repair struct {
	Cutoff, Progress time.Time
	FanOut           *checkpoint.Checkpoint
}

func (e Repair) apply(run checkpoint.Run, now time.Time) Result {
	progress := run.UpdatedAt
	if e.Progress.After(progress) {
		progress = e.Progress
	}
	if run.Status != checkpoint.StatusRunning || progress.After(e.Cutoff) {
		return Result{Run: run}
	}
	if f := e.FanOut; f != nil && f.FanOut != nil && f.Step == run.Step-1 {
		return Result{Run: run, Commands: []Command{PublishFanOut{Checkpoint: *f, Suffix: queue.RepairSuffix(run, progress)}}}
	}
	return Result{Run: run, Commands: []Command{PublishStep{MsgID: queue.RepairMsgID(run, progress), Repair: true,
		Lost: fmt.Sprintf("run %s looked stuck, and its step was not published again", run.ID)}}}
}
