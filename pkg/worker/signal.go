package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// signalsFor returns the signals step n of run may read: those no step
// consumed (a step's commit takes what it read off the record).
func signalsFor(run checkpoint.Run) []checkpoint.Signal {
	var out []checkpoint.Signal
	for _, s := range run.Signals {
		if s.Pending() {
			out = append(out, s)
		}
	}
	return out
}

// parkForSignal parks the run until the signal sw.Name comes, or its TTL
// passes: a compare-and-set on the run record, as a signal's delivery is,
// so a signal stored while the step ran makes the park lose and the step
// run again, and read it.
func (w *Worker) parkForSignal(ctx context.Context, d *delivery, run checkpoint.Run, sw steps.SignalWait) {
	for _, s := range signalsFor(run) {
		if s.Name == sw.Name && !s.Expired {
			// The step did not read the signal it waits for: it runs
			// again (a step that never reads it ends at the delivery fuse).
			w.retryTransient(d, "park", fmt.Errorf("step awaits signal %s while one is pending: read it with Context.Signal", sw.Name))
			return
		}
	}
	ttl := sw.TTL
	if ttl <= 0 {
		ttl = 72 * time.Hour
	}
	now := time.Now().UTC()
	next := run
	next.Status, next.UpdatedAt = checkpoint.StatusWaiting, now
	// An expiry this step read is spent: waiting again starts a new wait.
	next.ConsumeSignals(d.m.Step, expiriesOf(run, sw.Name))
	next.Wait = &checkpoint.Wait{Kind: checkpoint.WaitSignal, Name: sw.Name, Step: d.m.Step, StepName: run.StepName, Since: now, Deadline: now.Add(ttl)}
	next.Audit = append(append([]checkpoint.AuditEntry(nil), run.Audit...), checkpoint.AuditEntry{
		Kind: checkpoint.AuditParked, Step: d.m.Step, At: now, Reason: "waits for signal " + sw.Name + " until " + next.Wait.Deadline.Format(time.RFC3339),
	})
	stored, err := w.cfg.Store.UpdateRun(ctx, next)
	if errors.Is(err, checkpoint.ErrConflict) {
		w.c.lost.Add(1)
		w.afterLostCommit(ctx, d)
		return
	}
	if err != nil {
		w.retryTransient(d, "park", err)
		return
	}
	w.statusChanged(ctx, stored)
	if err := w.cfg.Store.IndexDue(ctx, run.ID, next.Wait.Deadline); err != nil {
		d.log.Warn().Err(err).Msg("deadline index not written; the scheduler will repair it")
	}
	w.c.parked.Add(1)
	d.log.Info().Str("signal", sw.Name).Time("deadline", next.Wait.Deadline).Msg("run parked for a signal")
	w.ack(d)
	w.done(run.Workflow, run.StepName, "parked", d)
}

// expiriesOf returns the ids of the expiry markers of name on run.
func expiriesOf(run checkpoint.Run, name string) []string {
	var ids []string
	for _, s := range signalsFor(run) {
		if s.Expired && s.Name == name {
			ids = append(ids, s.ID)
		}
	}
	return ids
}
