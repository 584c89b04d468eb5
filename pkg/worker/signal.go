package worker

import (
	"context"
	"errors"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/transition"
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
	r := transition.Apply(run, transition.ParkForSignal{Step: d.m.Step, Name: sw.Name, TTL: sw.TTL}, time.Now())
	if errors.Is(r.Err, transition.ErrSignalPending) {
		// The step did not read the signal it waits for: it runs again
		// (a step that never reads it ends at the delivery fuse).
		w.retryTransient(d, "park", r.Err)
		return
	}
	if !w.storeChange(ctx, d, "park", r) {
		return
	}
	w.c.parked.Add(1)
	d.log.Info().Str("signal", sw.Name).Time("deadline", r.Run.Wait.Deadline).Msg("run parked for a signal")
	w.ack(d)
	w.done(run.Workflow, run.StepName, "parked", d)
}
