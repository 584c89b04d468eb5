package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/transition"
)

// step runs the step protocol for one delivery (DESIGN.md, "Step
// protocol"), phase by phase. A phase that returns ok false has settled the
// delivery itself: acked it, handed it back or dead-lettered the run.
func (w *Worker) step(ctx context.Context, d *delivery) {
	snap, sticky, ok := w.load(ctx, d)
	if !ok {
		return
	}
	if !w.check(ctx, d, &snap, sticky) {
		return
	}
	def, ok := w.admit(ctx, d, snap.Run, 0)
	if !ok {
		return
	}
	slot, ok := w.slot(d, def, snap.Run)
	if !ok {
		return
	}
	sctx, res, took, ok := w.runBody(ctx, d, def, &snap)
	slot.Release()
	if !ok {
		return
	}
	if res.Kind == steps.KindWait {
		// Waiting for a decision: the run parks instead of committing n.
		w.park(ctx, d, snap.Run, res)
		return
	}
	committed, cp, ok := w.commit(ctx, d, &snap, sctx, res, took)
	if !ok {
		return
	}

	// 4. Publish step n+1 and wait for the PubAck. 5. Ack n.
	w.continueAfter(ctx, d, committed, cp, outcomeOf(cp.Status))
}

// load is step 1's read: the run and the checkpoints around step n.
func (w *Worker) load(ctx context.Context, d *delivery) (snap checkpoint.Snapshot, sticky, ok bool) {
	m := d.m
	// 1. Load run R and checkpoints n, n-1 and the journal of n, unless
	// this worker committed n-1 and this is the first delivery of the
	// message it published then (sticky.go).
	snap, sticky = w.sticky.take(m.RunID, d.msg.Headers().Get(jetstream.MsgIDHeader), d.attempt)
	var err error
	if sticky {
		w.c.sticky.Add(1)
	} else {
		snap, err = w.cfg.Store.Load(ctx, m.RunID, checkpoint.AtStep(m.Step))
	}
	if errors.Is(err, checkpoint.ErrNotFound) {
		w.unknownRun(d)
		return snap, sticky, false
	}
	if err != nil {
		w.retryTransient(d, "load", err)
		return snap, sticky, false
	}
	if d.orphan && snap.Run.Trace != "" && d.span.IsRecording() {
		d.span.AddLink(trace.LinkFromContext(client.RunContext(context.Background(), snap.Run)))
	}
	return snap, sticky, true
}

// check is the rest of step 1: it says whether the run waits for step n
// now. If checkpoint n is committed, or the run is not at step n, it
// settles the delivery and returns false.
func (w *Worker) check(ctx context.Context, d *delivery, snap *checkpoint.Snapshot, sticky bool) bool {
	m, run := d.m, snap.Run
	atCursor := run.Status == checkpoint.StatusRunning && run.Step == m.Step
	if !sticky && d.slot == nil && d.attempt > len(snap.Failures)+1 && run.Status == checkpoint.StatusRunning && (run.Step == m.Step || run.Step == m.Step+1) {
		// More deliveries than recorded failures: an earlier one died.
		// (Not again when a delivery that queued for a slot is handled
		// again: it was counted at its first handling.)
		w.cfg.Metrics.Resumed(run.Workflow, run.StepName)
	}
	if snap.Current != nil && (!atCursor || adoptable(run, snap.Current)) {
		// The step is done. Publish n+1 again only if the run still waits
		// for it, so replayed old messages don't cascade.
		w.c.replayed.Add(1)
		w.followCommitted(ctx, d, run, *snap.Current, "replayed")
		return false
	}
	if snap.Current != nil {
		d.log.Warn().Int("checkpoint_gen", snap.Current.Gen).Int("run_gen", run.Resumes).
			Msg("checkpoint of an attempt from before the last decision: running the step again")
	}
	switch {
	case run.Status == checkpoint.StatusRunning && run.Step == m.Step+1:
		// Checkpoint n read as missing while the run is past it: the reads
		// raced a commit. Make sure n+1 is published before acking n, or
		// the branches if step n fanned out: read checkpoint n again.
		w.c.replayed.Add(1)
		cp, err := w.cfg.Store.Checkpoint(ctx, run.ID, m.Step)
		if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
			w.retryTransient(d, "load", err)
			return false
		}
		if err != nil {
			// Not found again: continue as from a commit that moved the
			// run on in its generation.
			cp = checkpoint.Checkpoint{RunID: run.ID, Step: m.Step, Name: run.StepName, Status: checkpoint.StatusRunning, Gen: run.Resumes}
		}
		w.continueAfter(ctx, d, run, cp, "replayed")
		return false
	case run.Status == checkpoint.StatusRunning && run.Step < m.Step:
		// A message ahead of its run: a stale read, or a store that lost a
		// write. Give the store time before giving the message up.
		if d.attempt < aheadRetries {
			d.log.Warn().Int("run_step", run.Step).Msg("step message ahead of its run; retrying")
			_ = d.msg.NakWithDelay(w.transientDelay(d.attempt))
			w.done(run.Workflow, run.StepName, "error", d)
			return false
		}
		d.log.Error().Int("run_step", run.Step).Msg("step message ahead of its run after retries: acked; check the store for lost writes")
		w.ackStale(d, run.StepName)
		return false
	case run.Status == checkpoint.StatusDead && run.Step == m.Step:
		// The run died here; the dead letter may not have been published
		// before a crash. Publishing it again is deduplicated.
		w.publishDeadLetter(ctx, d, run)
		return false
	case run.Status != checkpoint.StatusRunning || run.Step != m.Step:
		w.ackStale(d, run.StepName)
		return false
	}
	return true
}

// admit finds the workflow definition that runs the step at run's cursor,
// unless the step has been delivered too often or the run reached a cap.
// branchSpend is what the branches of the fan-out at the cursor spent so
// far, which the run record counts only at the join.
func (w *Worker) admit(ctx context.Context, d *delivery, run checkpoint.Run, branchSpend float64) (steps.Definition, bool) {
	if d.name == "" {
		d.name = run.StepName
	}
	if fuse := max(3*w.retryOf(run, d.name).Attempts, minDeliveryFuse); d.attempt > fuse {
		// Deliveries that never finish (a step that kills its worker, or
		// hangs past every timeout) would bounce round the fleet forever.
		w.deadLetter(ctx, d, run, fmt.Sprintf("%s delivered %d times without finishing (does it crash or hang its worker?)", w.what(d), d.attempt-1))
		return nil, false
	}
	def, ok := w.cfg.Registry.Lookup(run.Workflow, run.Version)
	if !ok {
		// Another worker of the fleet may run this version: release it.
		d.log.Error().Int("version", run.Version).Msg("workflow version not registered in this worker; releasing the step")
		_ = d.msg.NakWithDelay(10 * time.Second)
		w.done(run.Workflow, run.StepName, "error", d)
		return nil, false
	}
	if reason := capReached(def, run, branchSpend); reason != "" {
		w.deadLetter(ctx, d, run, reason)
		return nil, false
	}
	return def, true
}

// runBody is step 2. An error of the body goes to the step's retry policy.
func (w *Worker) runBody(ctx context.Context, d *delivery, def steps.Definition, snap *checkpoint.Snapshot) (sctx *steps.Context, res steps.Result, took time.Duration, ok bool) {
	m, run := d.m, snap.Run
	// 2. Run the step from checkpoint n-1's state (the input for step 1).
	state := run.Input
	if m.Step > 1 {
		if snap.Previous == nil {
			w.retryTransient(d, "load", fmt.Errorf("checkpoint %s:%d missing under cursor %d", run.ID, m.Step-1, run.Step))
			return nil, res, 0, false
		}
		state = snap.Previous.State
	}
	var outputs []json.RawMessage
	var branchSteps []string
	var branchSpend float64
	if snap.Previous != nil && snap.Previous.FanOut != nil {
		if outputs, branchSpend, ok = w.gate(ctx, d, run, snap.Previous); !ok {
			return nil, res, 0, false
		}
		for _, b := range snap.Previous.FanOut.Branches {
			branchSteps = append(branchSteps, b.Step)
		}
	}
	var children []steps.ChildResult
	if snap.Previous != nil && len(snap.Previous.Children) > 0 {
		var err error
		if children, err = w.childResults(ctx, run, m.Step-1); err != nil {
			w.retryTransient(d, "read child runs", err)
			return nil, res, 0, false
		}
	}
	w.at(ctx, BeforeStep, d)
	sctx = steps.NewContext(steps.ContextConfig{
		RunID: run.ID, Workflow: run.Workflow, Version: run.Version,
		Step: m.Step, StepName: run.StepName, Attempt: d.attempt,
		BranchOutputs: outputs,
		BranchSteps:   branchSteps,
		Children:      children,
		Signals:       signalsFor(run),
		Journal:       journalOf(snap.Journal, run.Resumes),
		Recorder:      recorder{w: w, d: d, gen: run.Resumes},
		Approvals:     approvalsFor(run, m.Step),
		Heartbeat:     func() { _ = d.msg.InProgress() },
		BlobStore:     w.cfg.Blobs,
		RateLimits:    w.rateLimitsFor(d, def, run),
	})
	// The join's commit counts what its branches spent, once.
	sctx.Spend(branchSpend)
	began := time.Now()
	res, err := w.execute(ctx, d, def, sctx, run.StepName, state, m.Step == 1)
	took = time.Since(began)
	if err != nil {
		w.stepFailed(ctx, d, def, run, sctx, err)
		return sctx, res, took, false
	}
	return sctx, res, took, true
}

// commit is step 3 for a result that does not wait for a decision: it
// returns the run record and checkpoint n as committed.
func (w *Worker) commit(ctx context.Context, d *delivery, snap *checkpoint.Snapshot, sctx *steps.Context, res steps.Result, took time.Duration) (checkpoint.Run, checkpoint.Checkpoint, bool) {
	run := snap.Run
	// 3. Commit checkpoint n first-writer-wins with the run record.
	cp, change := toCommit(run, d, sctx, res, took, w.tokenWait(ctx, d, snap.Failures))
	if change.Err != nil { // the run is not at this step (cannot be: it was loaded so)
		w.c.lost.Add(1)
		w.afterLostCommit(ctx, d)
		return run, cp, false
	}
	next := change.Run
	size := cp.Size()
	warn, err := w.cfg.Budget.Check(run.ID, d.m.Step, size)
	if err != nil {
		w.deadLetter(ctx, d, run, err.Error())
		return run, cp, false
	}
	if warn {
		d.log.Warn().Int("bytes", size).Msg("checkpoint over the warning size")
	}
	committed, err := w.cfg.Store.Commit(ctx, next, cp)
	switch {
	case errors.Is(err, checkpoint.ErrCheckpointExists), errors.Is(err, checkpoint.ErrConflict):
		// Another writer won (a redelivery ran the step at the same time) or
		// the run moved (cancelled): discard our result, follow the store.
		w.c.lost.Add(1)
		d.log.Info().Err(err).Msg("commit lost; continuing with the stored result")
		w.afterLostCommit(ctx, d)
		return committed, cp, false
	case err != nil:
		w.retryTransient(d, "commit", err)
		return committed, cp, false
	}
	w.c.committed.Add(1)
	w.reportCommit(run, cp, size, snap.Previous)
	if committed.Step == next.Step && committed.Status == next.Status {
		// The record is this commit's (on the KV store, one that lost
		// its compare-and-set may have found it moved on by a reader
		// that rolled it forward, which announced it).
		w.carryOut(ctx, d.log, committed, change.Commands)
	}
	d.log.Info().Str("name", cp.Name).Str("next", cp.Next).Str("status", string(cp.Status)).Int("bytes", size).Msg("step committed")
	w.at(ctx, AfterCheckpoint, d)
	return committed, cp, true
}

// toCommit returns checkpoint n holding the step's result res, which
// waited tw for tokens, and what its commit does to the run
// (transition.Commit).
func toCommit(run checkpoint.Run, d *delivery, sctx *steps.Context, res steps.Result, took time.Duration, tw tokenWait) (checkpoint.Checkpoint, transition.Result) {
	m := d.m
	cp := checkpoint.Checkpoint{
		RunID: run.ID, Step: m.Step, Name: run.StepName, State: res.State, Gen: run.Resumes,
		Journal: sctx.Calls(), Effects: sctx.Effects(), Attempt: d.attempt,
		At: time.Now().UTC(), DurationMS: millis(took),
		Resource: d.resource, SlotWaitMS: millis(d.waited),
		TokenResource: tw.resource, TokenWaitMS: millis(tw.d),
	}
	cp.Spend = sctx.Spent()
	cp.Signals = sctx.ConsumedSignals()
	sort.Strings(cp.Signals)
	switch res.Kind {
	case steps.KindNext:
		cp.Next, cp.Status = res.Next, checkpoint.StatusRunning
	case steps.KindComplete:
		cp.Status = checkpoint.StatusCompleted
	case steps.KindFail:
		cp.Status, cp.Error = checkpoint.StatusFailed, res.Reason
	case steps.KindChildren:
		// With children, committed like a timer: the run waits at the
		// next step, which its children resume once they have all ended
		// (continueAfter starts them). Without, the next step runs at
		// once.
		cp.Next, cp.Status = res.Next, checkpoint.StatusRunning
		if len(res.Children) > 0 {
			cp.Status, cp.Children = checkpoint.StatusWaiting, res.Children
		}
	case steps.KindFanOut:
		// Committed like a step that goes on to the join; the branches
		// run first (continueAfter publishes them).
		cp.Next, cp.Status = res.Next, checkpoint.StatusRunning
		cp.FanOut = &checkpoint.FanOut{Branches: res.Branches}
	case steps.KindSleep:
		// Committed like a step that goes on, but the run waits for its
		// timer instead of publishing the next step.
		cp.Next, cp.Status, cp.WakeAt = res.Next, checkpoint.StatusWaiting, res.Until.UTC()
	}
	return cp, transition.Apply(run, transition.Commit{Checkpoint: cp}, cp.At)
}
