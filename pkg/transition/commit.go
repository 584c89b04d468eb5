package transition

import (
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Commit is a step's checkpoint moving the run on: the worker applies it
// to the run it read when it commits the step (Store.Commit writes the
// checkpoint and the run together); a worker that finds a checkpoint the
// run record lags (a commit whose second write was lost) applies it to
// roll the record forward; the KV store applies it when its commit's
// compare-and-set on the run lost to a change that kept the run at the
// step. It is the one statement of what a commit does to a run:
//
//   - the step count and the spend grow by the step's;
//   - the signals the step read leave the pending list;
//   - Running: the cursor moves to the next step, which is published
//     under its regular id (or the fan-out's branches are: see Follow);
//   - Waiting: the cursor moves to the next step, which waits for the
//     step's child runs, or else for its timer (WakeAt);
//   - Completed, Failed: the run ends with the checkpoint's error.
//
// It applies only to a run running the checkpoint's step in the
// checkpoint's generation (ErrNotAtStep otherwise: the run moved on, or
// was decided, cancelled or killed since). The run's UpdatedAt becomes
// the time Apply is given.
type Commit struct{ Checkpoint checkpoint.Checkpoint }

func (c Commit) apply(run checkpoint.Run, now time.Time) Result {
	cp := c.Checkpoint
	if run.Status != checkpoint.StatusRunning || run.Step != cp.Step || run.Resumes != cp.Gen {
		return Result{Run: run, Err: fmt.Errorf("run %s is %s at step %d, generation %d; the checkpoint is of step %d, generation %d: %w",
			run.ID, run.Status, run.Step, run.Resumes, cp.Step, cp.Gen, ErrNotAtStep)}
	}
	next := run
	next.UpdatedAt = now
	next.Steps = run.Steps + 1
	next.Spend = run.Spend + cp.Spend
	next.ConsumeSignals(cp.Step, cp.Signals)
	var cmds []Command
	switch cp.Status {
	case checkpoint.StatusRunning:
		next.Step, next.StepName = cp.Step+1, cp.Next
		cmds = follow(next, cp, false)
	case checkpoint.StatusWaiting:
		next.Step, next.StepName, next.Status = cp.Step+1, cp.Next, checkpoint.StatusWaiting
		if len(cp.Children) > 0 {
			next.Wait = &checkpoint.Wait{Kind: checkpoint.WaitChildren, Step: cp.Step + 1, StepName: cp.Next, Since: cp.At}
			cmds = append(cmds, StartChildren{Checkpoint: cp})
		} else {
			next.Wait = &checkpoint.Wait{Kind: checkpoint.WaitTimer, Step: cp.Step + 1, StepName: cp.Next, Since: cp.At, Deadline: cp.WakeAt}
			cmds = append(cmds, IndexDue{At: cp.WakeAt})
		}
		cmds = append([]Command{PublishStatus{}}, cmds...)
	default:
		next.Status, next.Error = cp.Status, cp.Error
		cmds = []Command{PublishStatus{}, NotifyParent{}}
	}
	return Result{Run: next, Store: true, Commands: cmds}
}
