package transition

import (
	"fmt"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// Start is a run's creation seen by the one who asked for it, applied to
// the run as the store holds it: the run CreateRun stored (Created), or
// the one it found under the id (a start asked again, whose first
// publish may have been lost). A created run announces itself, then its
// first step under its regular id ("<run>:1"); a run found still
// running at step 1, never resumed nor redriven, publishes it again under
// that id (Again), which the stream drops within its duplicate window and
// the step protocol after it. Nothing is stored.
type Start struct{ Created bool }

func (s Start) apply(run checkpoint.Run, now time.Time) Result {
	if run.Status != checkpoint.StatusRunning || run.Step != 1 || run.Resumes != 0 || run.Redrives != 0 {
		// Only step 1 as the start published it: a run resumed or
		// redriven at step 1 was published by that, under its own id.
		return Result{Run: run}
	}
	step := PublishStep{MsgID: queue.MsgID(run.ID, 1)}
	if !s.Created {
		step.Again = true
		return Result{Run: run, Commands: []Command{step}}
	}
	step.Lost = fmt.Sprintf("run %s created but its first step was not published; start it again with the same id to publish it", run.ID)
	return Result{Run: run, Commands: []Command{PublishStatus{}, step}}
}

// Follow is a committed checkpoint met again, applied to the run as
// stored after its commit: the step's redelivery found it (its worker
// died after the commit, or a commit that lost to another found the
// winner's), or a worker rolled a lagging run record forward over it.
// It owes what the commit published (Commit's commands): the branches of
// a fan-out or its join, the next step under its regular id, or the
// start of the child runs the run waits for, each as the commit's were,
// publishes again (Again). Nothing is stored. A run that is no longer
// at the step after the checkpoint owes nothing, nor one resumed since (a
// later generation than the checkpoint's) or redriven at that step (the
// redrive found the checkpoint committed): the resume or the redrive
// published the step under its own id. A redrive at the checkpoint's step
// or before it does not count: the commit came after it (on the KV
// store, a commit that lost its compare-and-set to the redrive lands on
// the redriven run). A run redriven by a version that did not record
// where (Run.RedriveStep 0) owes the step, as before.
type Follow struct{ Checkpoint checkpoint.Checkpoint }

func (f Follow) apply(run checkpoint.Run, now time.Time) Result {
	if run.Resumes != f.Checkpoint.Gen || run.RedriveStep == f.Checkpoint.Step+1 {
		// The run was resumed since, or redriven at the step after the
		// checkpoint: that published the step.
		return Result{Run: run}
	}
	return Result{Run: run, Commands: follow(run, f.Checkpoint, true)}
}

// follow is what a commit of cp publishes once run, as stored after it,
// is at the step after cp: the child runs it waits for are started, or,
// when the commit moved the run on by itself (cp running), the fan-out's
// branches (or its join, once they are all in) or the next step under
// its regular id "<run>:<n>": once per step, whatever the generation,
// because a step's checkpoint is committed once. A commit that started
// children or put the run to sleep owes no step message: the children's
// end or the wake publishes it under its own id, and one under the
// regular id would run the step a second time beside it. again marks a
// publish owed by an earlier commit.
func follow(run checkpoint.Run, cp checkpoint.Checkpoint, again bool) []Command {
	switch {
	case run.Step != cp.Step+1:
		return nil
	case len(cp.Children) > 0:
		if run.Status == checkpoint.StatusWaiting && run.Wait != nil && run.Wait.Kind == checkpoint.WaitChildren {
			return []Command{StartChildren{Checkpoint: cp}}
		}
		return nil
	case cp.Status != checkpoint.StatusRunning || run.Status != checkpoint.StatusRunning:
		return nil
	case cp.FanOut != nil:
		return []Command{PublishFanOut{Checkpoint: cp}}
	}
	// Lost without fmt: this is every step's path.
	return []Command{PublishStep{MsgID: queue.MsgID(run.ID, run.Step), Again: again,
		Lost: "run " + run.ID + " committed step " + strconv.Itoa(cp.Step) + " but its next step was not published; the step's redelivery publishes it"}}
}
