package transition

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// Bounds of the pending signals a run keeps (they live on its record
// until a step consumes them).
const (
	MaxSignalsPerRun     = 100
	MaxSignalBytesPerRun = 256 << 10
)

var (
	// ErrTooManySignals: the run keeps MaxSignalsPerRun pending signals,
	// or MaxSignalBytesPerRun bytes of their data, already.
	ErrTooManySignals = errors.New("the run holds as many signals as it may")
	// ErrSignalIDReused: a signal id was delivered before with another
	// name or other data.
	ErrSignalIDReused = errors.New("signal id reused")
)

// Signal delivers a signal (its At is the event's time) to a run: it is
// stored whether or not the run waits for it yet; a run waiting for a
// signal of its name resumes, a generation later. A signal whose id the
// run holds changes nothing (Delivered says which it was); a dead run
// keeps its signals for a redrive.
type Signal struct{ Signal checkpoint.Signal }

func (e Signal) apply(run checkpoint.Run, now time.Time) Result {
	req := e.Signal
	if s, same, ok := Delivered(run, req.ID, req.Name, req.Data); ok {
		if !same {
			return Result{Run: run, Err: fmt.Errorf("signal id %s was delivered to %s before as %s with other data: %w: send a new signal under a new id", req.ID, run.ID, s.Name, ErrSignalIDReused)}
		}
		return Result{Run: run}
	}
	if run.Status.Terminal() && run.Status != checkpoint.StatusDead {
		return Result{Run: run, Err: fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrNotActive)}
	}
	if err := signalRoom(run, len(req.Data)); err != nil {
		return Result{Run: run, Err: err}
	}
	req.At = now
	next := run
	next.UpdatedAt = now
	next.Signals = appended(run.Signals, req)
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: checkpoint.AuditSignal, Step: run.Step, At: now, By: req.By, Channel: req.Channel,
		Reason: fmt.Sprintf("signal %s (id %s, %d bytes)", req.Name, req.ID, len(req.Data)),
	})
	w := run.Wait
	if run.Status != checkpoint.StatusWaiting || w == nil || w.Kind != checkpoint.WaitSignal || w.Name != req.Name {
		return Result{Run: next, Store: true}
	}
	next.Status, next.Step, next.StepName, next.Wait = checkpoint.StatusRunning, w.Step, w.StepName, nil
	next.Resumes++
	return Result{Run: next, Store: true, Resumed: true, Commands: []Command{
		PublishStatus{},
		PublishStep{MsgID: queue.ResumeMsgID(next, queue.Signal),
			Lost: fmt.Sprintf("signal stored and run %s resumed, but its step was not published; the scheduler's repair publishes it", next.ID)},
	}}
}

// Delivered finds a signal of the id that run holds, pending or
// consumed, and whether it is the same signal (same name and data).
func Delivered(run checkpoint.Run, id, name string, data []byte) (checkpoint.Signal, bool, bool) {
	for _, s := range run.Signals {
		if s.ID == id && !s.Expired {
			return s, s.Name == name && bytes.Equal(s.Data, data), true
		}
	}
	for _, c := range run.Consumed {
		if c.ID == id {
			return c.Signal(), c.Name == name && c.DataSHA256 == checkpoint.SignalDataSHA256(data), true
		}
	}
	return checkpoint.Signal{}, false, false
}

// signalRoom refuses a signal of size bytes past the run's bounds on what
// is pending: pending signals live on the run record, which every step
// reads and a KV bucket caps at 1 MB. Consumed signals and expiry markers
// do not count.
func signalRoom(run checkpoint.Run, size int) error {
	n := 0
	for _, s := range run.Signals {
		if s.Pending() && !s.Expired {
			n++
			size += len(s.Data)
		}
	}
	if n >= MaxSignalsPerRun || size > MaxSignalBytesPerRun {
		return fmt.Errorf("run %s holds %d pending signals (%d bytes of data with this one); at most %d and %d bytes: %w: a step must consume them (Context.Signal) before more can come", run.ID, n, size, MaxSignalsPerRun, MaxSignalBytesPerRun, ErrTooManySignals)
	}
	return nil
}
