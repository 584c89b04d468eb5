package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/transition"
)

// branch runs the protocol for the delivery of branch i of the fan-out
// whose join is step n (docs/design-parallel.md): load the run, the
// fan-out and the branch's checkpoint; run the branch body with the key
// "<run>:step<n>.<i>"; commit the branch's checkpoint, first writer wins;
// publish the join if every branch is in; ack.
func (w *Worker) branch(ctx context.Context, d *delivery) {
	m := d.m
	n, i := m.BranchOf, m.Branch
	snap, err := w.cfg.Store.Load(ctx, m.RunID, checkpoint.AtBranch(n, i))
	if errors.Is(err, checkpoint.ErrNotFound) {
		w.unknownRun(d)
		return
	}
	if err != nil {
		w.retryTransient(d, "load", err)
		return
	}
	run, fan := snap.Run, snap.Previous
	if fan == nil || fan.FanOut == nil || i > len(fan.FanOut.Branches) {
		// No fan-out with this branch at step n-1: a message ahead of its
		// run's store, or one of a fan-out that does not exist.
		if run.Status == checkpoint.StatusRunning && run.Step < n && d.attempt < aheadRetries {
			_ = d.msg.NakWithDelay(w.transientDelay(d.attempt))
			w.done(run.Workflow, "", "error", d)
			return
		}
		d.log.Warn().Int("run_step", run.Step).Msg("branch message of no fan-out: acked as stale")
		w.ackStale(d, "")
		return
	}
	d.name = fan.FanOut.Branches[i-1].Step
	if d.slot == nil && d.attempt > len(snap.Failures)+1 && run.Status == checkpoint.StatusRunning && run.Step == n {
		// More deliveries than recorded failures: an earlier one died, as
		// check counts for a step.
		w.cfg.Metrics.Resumed(run.Workflow, d.name)
	}
	if cur := snap.Current; cur != nil && !(cur.Failed() && cur.Redrives < run.Redrives) {
		// Done before, or failed for good: its outcome stands.
		w.branchStored(ctx, d, run, *fan, *cur)
		return
	}
	switch {
	case run.Status == checkpoint.StatusRunning && run.Step == n:
	case run.Status == checkpoint.StatusRunning && run.Step < n && d.attempt < aheadRetries:
		_ = d.msg.NakWithDelay(w.transientDelay(d.attempt))
		w.done(run.Workflow, d.name, "error", d)
		return
	case run.Status == checkpoint.StatusDead && run.Step == n && run.FailedBranch == i && snap.Current == nil:
		// This branch sent the run to the dead letters before its failure
		// was stored on its key (an older worker); the letter may not have
		// been published before a crash.
		w.publishDeadLetter(ctx, d, run)
		return
	default:
		// The run went on, ended, died in another branch or was cancelled:
		// a queued branch does nothing more.
		w.ackStale(d, d.name)
		return
	}
	// The cap counts what the fan-out's branches committed so far: the run
	// record counts it only at the join.
	def, ok := w.admit(ctx, d, run, snap.BranchSpend)
	if !ok {
		return
	}
	slot, ok := w.slot(d, def, run)
	if !ok {
		return
	}
	defer slot.Release()
	w.runBranch(ctx, d, def, run, *fan, snap)
}

// unknownRun settles a delivery whose run the store does not know: a
// replica may not have it yet, so it is retried a few times first.
func (w *Worker) unknownRun(d *delivery) {
	if d.attempt < aheadRetries {
		_ = d.msg.NakWithDelay(w.transientDelay(d.attempt))
		w.done(d.m.Workflow, "", "error", d)
		return
	}
	d.log.Warn().Msg("step message for an unknown run: acked as stale")
	w.ackStale(d, "")
}

// runBranch runs the branch body and commits its checkpoint; snap is the
// branch as loaded.
func (w *Worker) runBranch(ctx context.Context, d *delivery, def steps.Definition, run checkpoint.Run, fan checkpoint.Checkpoint, snap checkpoint.Snapshot) {
	m := d.m
	b := fan.FanOut.Branches[m.Branch-1]
	w.at(ctx, BeforeStep, d)
	sctx := steps.NewContext(steps.ContextConfig{
		RunID: run.ID, Workflow: run.Workflow, Version: run.Version,
		Step: m.BranchOf, Branch: m.Branch, StepName: b.Step, Attempt: d.attempt,
		Journal:    journalOf(snap.Journal, run.Resumes),
		Recorder:   recorder{w: w, d: d, gen: run.Resumes},
		Heartbeat:  func() { _ = d.msg.InProgress() },
		BlobStore:  w.cfg.Blobs,
		RateLimits: w.rateLimitsFor(d, def, run),
	})
	began := time.Now()
	w.cfg.Metrics.BranchRunning(run.Workflow, 1)
	out, err := w.executeBranch(ctx, def, sctx, b)
	w.cfg.Metrics.BranchRunning(run.Workflow, -1)
	took := time.Since(began)
	if err != nil {
		w.stepFailed(ctx, d, def, run, sctx, err)
		return
	}
	cp := checkpoint.Checkpoint{
		RunID: run.ID, Step: m.BranchOf, Branch: m.Branch, Name: b.Step, State: out,
		Of: len(fan.FanOut.Branches), Status: checkpoint.StatusRunning, Gen: run.Resumes, Redrives: run.Redrives, Journal: sctx.Calls(), Effects: sctx.Effects(),
		Attempt: d.attempt, At: time.Now().UTC(), Spend: sctx.Spent(),
		DurationMS: millis(took),
		Resource:   d.resource, SlotWaitMS: millis(d.waited),
	}
	tw := w.tokenWait(ctx, d, snap.Failures)
	cp.TokenResource, cp.TokenWaitMS = tw.resource, millis(tw.d)
	size := cp.Size()
	warn, err := w.cfg.Budget.Check(run.ID, m.BranchOf, size)
	if err != nil {
		w.deadLetter(ctx, d, run, err.Error())
		return
	}
	if warn {
		d.log.Warn().Int("bytes", size).Msg("branch checkpoint over the warning size")
	}
	w.branchCommitted(ctx, d, run, fan, cp, "committed")
}

// executeBranch runs a branch body under the step timeout.
func (w *Worker) executeBranch(ctx context.Context, def steps.Definition, sctx *steps.Context, b checkpoint.Branch) (out json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("branch %s panicked: %v", b.Step, p)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	return def.ExecuteBranch(ctx, sctx, b.Step, b.Input)
}

// branchCommitted commits cp, the branch's checkpoint (again, when it is
// the one stored: the store then only counts), and publishes the join
// when the count says every branch of the fan-out is in and the run still
// waits at the join. Then it acks.
func (w *Worker) branchCommitted(ctx context.Context, d *delivery, run checkpoint.Run, fan checkpoint.Checkpoint, cp checkpoint.Checkpoint, outcome string) {
	count, err := w.cfg.Store.CommitBranch(ctx, cp)
	switch {
	case errors.Is(err, checkpoint.ErrCheckpointExists):
		if outcome == "committed" {
			// Another delivery stored the branch's outcome first: a
			// result, or its failure.
			w.c.lost.Add(1)
			d.log.Info().Msg("branch commit lost; continuing with the stored outcome")
			w.afterLostBranch(ctx, d)
			return
		}
	case err != nil:
		w.retryTransient(d, "commit branch", err)
		return
	case outcome == "committed":
		w.c.committed.Add(1)
		w.reportCommit(run, cp, cp.Size(), nil)
		ev := d.log.Info().Str("name", cp.Name).Int("branches", len(fan.FanOut.Branches))
		if count > 0 {
			ev = ev.Int("branches_done", count)
		} else {
			// 0 is no count: the store left it to a writer bound to
			// count after this one (CommitBranch). The KV store counts
			// only in the writer of the newest branch key, so branches
			// that commit at once all read 0 but the last.
			ev = ev.Bool("counted_by_a_later_branch", true)
		}
		ev.Msg("branch committed")
		w.at(ctx, AfterCheckpoint, d)
	}
	r := transition.Apply(run, transition.BranchCommitted{Step: cp.Step, Count: count, Of: len(fan.FanOut.Branches)}, time.Now())
	for _, cmd := range r.Commands {
		j, ok := cmd.(transition.PublishJoin)
		if !ok {
			continue
		}
		// Every branch is in: publish the join, once per fan-out (its id
		// dedupes the other writers that count them all).
		join := queue.StepMsg{RunID: run.ID, Workflow: run.Workflow, Step: cp.Step, Name: fan.Next}
		if _, err := queue.PublishStep(underRoot(ctx, run), w.cfg.JetStream, join, j.MsgID); err != nil {
			w.retryTransient(d, "publish join", err)
			return
		}
		d.log.Info().Msg("all branches in; join published")
		w.cfg.Metrics.JoinPublished(run.Workflow)
		w.at(ctx, AfterPublish, d)
	}
	w.ack(d)
	w.done(run.Workflow, cp.Name, outcome, d)
}

// gate lets the join of the fan-out committed at checkpoint fan run only
// when every branch's checkpoint is read from the store: join messages
// also come from repairs, redrives and replays. It returns the branches'
// outputs in branch order and what they spent; otherwise it acks the
// delivery as early (the last branch publishes the join).
func (w *Worker) gate(ctx context.Context, d *delivery, run checkpoint.Run, fan *checkpoint.Checkpoint) ([]json.RawMessage, float64, bool) {
	total := len(fan.FanOut.Branches)
	done, err := w.cfg.Store.BranchCheckpoints(ctx, run.ID, fan.Step+1, total)
	if err != nil {
		w.retryTransient(d, "read branches", err)
		return nil, 0, false
	}
	if len(done) < total {
		d.log.Info().Int("branches_done", len(done)).Int("branches", total).Msg("join before all its branches: acked; the last branch publishes it")
		w.ackStale(d, run.StepName)
		return nil, 0, false
	}
	outputs := make([]json.RawMessage, total)
	var spend float64
	for k, cp := range done {
		outputs[k] = cp.State
		spend += cp.Spend
	}
	return outputs, spend, true
}

// childResults reads how the child runs step n of run started ended, with
// each one's last committed state.
func (w *Worker) childResults(ctx context.Context, run checkpoint.Run, n int) ([]steps.ChildResult, error) {
	children, err := w.runs.ChildResults(ctx, run, n)
	if err != nil {
		return nil, err
	}
	out := make([]steps.ChildResult, len(children))
	for i, c := range children {
		out[i] = steps.ChildResult{ID: c.ID, Workflow: c.Workflow, Status: c.Status, Error: c.Error}
		if c.Step < 1 {
			continue
		}
		cp, err := w.cfg.Store.Checkpoint(ctx, c.ID, c.Step)
		if errors.Is(err, checkpoint.ErrNotFound) && c.Step > 1 {
			// Ended before committing its cursor's step (cancelled, dead):
			// the step before holds its last state.
			cp, err = w.cfg.Store.Checkpoint(ctx, c.ID, c.Step-1)
		}
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("last checkpoint of child %s: %w", c.ID, err)
		}
		out[i].State = cp.State
	}
	return out, nil
}

// branchStored settles a delivery of a branch whose outcome cp is stored:
// a result is counted again and the join published if all are in (its
// writer may have died before it could); a failure sends the run to the
// dead letters (its writer may have died before it could).
func (w *Worker) branchStored(ctx context.Context, d *delivery, run checkpoint.Run, fan checkpoint.Checkpoint, cp checkpoint.Checkpoint) {
	if cp.Failed() {
		w.branchDied(ctx, d, run, cp)
		return
	}
	w.c.replayed.Add(1)
	w.branchCommitted(ctx, d, run, fan, cp, "replayed")
}

// afterLostBranch reloads the branch after this delivery's outcome lost to
// another's and goes on with the stored one.
func (w *Worker) afterLostBranch(ctx context.Context, d *delivery) {
	snap, err := w.cfg.Store.Load(ctx, d.m.RunID, checkpoint.AtBranch(d.m.BranchOf, d.m.Branch))
	if err != nil {
		w.retryTransient(d, "reload branch", err)
		return
	}
	if snap.Current == nil || snap.Previous == nil || snap.Previous.FanOut == nil {
		w.retryTransient(d, "reload branch", errors.New("the branch's stored outcome is not readable yet"))
		return
	}
	w.branchStored(ctx, d, snap.Run, *snap.Previous, *snap.Current)
}

// branchFailed stores the failure of the delivery's branch on the
// branch's own key, first writer wins against any other outcome of the
// branch (a commit by another delivery of it: a replay, a repair, a
// redrive), then sends the run to the dead letters. The branch has one
// outcome, so a failure that loses to a commit changes nothing, and a
// commit that loses to a failure publishes no join.
func (w *Worker) branchFailed(ctx context.Context, d *delivery, run checkpoint.Run, reason string) {
	m := d.m
	mark := checkpoint.Checkpoint{
		RunID: run.ID, Step: m.BranchOf, Branch: m.Branch, Name: d.name, Status: checkpoint.StatusDead,
		Error: reason, Gen: run.Resumes, Redrives: run.Redrives, Attempt: d.attempt, At: time.Now().UTC(),
	}
	_, err := w.cfg.Store.CommitBranch(ctx, mark)
	if errors.Is(err, checkpoint.ErrCheckpointExists) {
		d.log.Info().Msg("the branch's outcome was stored by another delivery: its failure here is dropped")
		w.afterLostBranch(ctx, d)
		return
	}
	if err != nil {
		w.retryTransient(d, "store branch failure", err)
		return
	}
	w.branchDied(ctx, d, run, mark)
}

// branchDied marks run dead for the branch failure stored as mark, unless
// the run is past it, and publishes the dead letter. Branch commits never
// move the run's revision, so a conflict here is another change of the
// run (a signal, a cancel): read it again.
func (w *Worker) branchDied(ctx context.Context, d *delivery, run checkpoint.Run, mark checkpoint.Checkpoint) {
	for {
		r := transition.Apply(run, transition.BranchDied{Mark: mark}, time.Now())
		switch {
		case r.Err != nil:
			// Redriven since (the branch runs again), gone on, or ended.
			w.ackStale(d, d.name)
			return
		case !r.Store:
			// Marked by the failure's writer, which may have died before
			// publishing the letter: publishing it again is deduplicated.
			w.publishDeadLetter(ctx, d, run)
			return
		}
		stored, err := w.cfg.Store.UpdateRun(ctx, r.Run)
		if errors.Is(err, checkpoint.ErrConflict) {
			if run, err = w.cfg.Store.GetRun(ctx, run.ID); err != nil {
				w.retryTransient(d, "mark dead", err)
				return
			}
			continue
		}
		if err != nil {
			w.retryTransient(d, "mark dead", err)
			return
		}
		w.markedDead(ctx, d, stored)
		return
	}
}
