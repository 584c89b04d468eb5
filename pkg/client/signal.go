package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"

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
	// ErrBadSignal: a signal's name, id or data is malformed or too large.
	ErrBadSignal = errors.New("bad signal")
	// ErrTooManySignals: the run keeps MaxSignalsPerRun pending signals,
	// or MaxSignalBytesPerRun bytes of their data, already.
	ErrTooManySignals = errors.New("the run holds as many signals as it may")
	// ErrSignalIDReused: a signal id was delivered before with another
	// name or other data.
	ErrSignalIDReused = errors.New("signal id reused")
	// ErrUnknownSignal: the run's workflow never waits for a signal of
	// that name.
	ErrUnknownSignal = errors.New("the run's workflow waits for no such signal")
)

// SignalRequest delivers a named signal to a run.
type SignalRequest struct {
	RunID string
	Name  string
	// Data is the signal's JSON payload (at most checkpoint.MaxSignalBytes);
	// nil means none.
	Data json.RawMessage
	// ID identifies the signal for retries: sending the same id again
	// changes nothing and answers as the first did. Empty: a random id.
	ID string
	// By and Channel say who sent it and how (recorded and audited).
	By      string
	Channel string
}

// SignalResult says what Signal did.
type SignalResult struct {
	Run checkpoint.Run
	// Signal as stored.
	Signal checkpoint.Signal
	// Resumed: the run was waiting for this signal and now runs again.
	Resumed bool
	// Duplicate: a signal of this id was delivered before; nothing changed.
	Duplicate bool
}

// Signal delivers a signal to a run: it is stored on the run (and
// audited) whether or not the run waits for it yet, and a step consumes it
// with steps.Context.Signal. If the run waits for a signal of that name
// now, it resumes: the waiting step runs again and reads it. Refused with
// no change: an unknown run (checkpoint.ErrNotFound), a run that ended
// (ErrNotActive), a malformed name, id or data (ErrBadSignal), a name the
// run's workflow version does not declare (ErrUnknownSignal).
func (c *Client) Signal(ctx context.Context, req SignalRequest) (res SignalResult, err error) {
	ctx, span := c.actionSpan(ctx, req.RunID, "durable.signal", attribute.String("durable.signal", req.Name),
		attribute.String("durable.by", req.By), attribute.String("durable.channel", req.Channel))
	defer func() { endSpan(span, err) }()
	return c.signal(ctx, req)
}

func (c *Client) signal(ctx context.Context, req SignalRequest) (SignalResult, error) {
	if err := checkSignal(&req); err != nil {
		return SignalResult{}, err
	}
	for {
		run, err := c.store.GetRun(ctx, req.RunID)
		if err != nil {
			return SignalResult{}, fmt.Errorf("run %s: %w", req.RunID, err)
		}
		if s, same, ok := delivered(run, req); ok {
			if !same {
				return SignalResult{Run: run, Signal: s}, fmt.Errorf("signal id %s was delivered to %s before as %s with other data: %w: send a new signal under a new id", req.ID, run.ID, s.Name, ErrSignalIDReused)
			}
			return SignalResult{Run: run, Signal: s, Duplicate: true}, nil
		}
		// A dead run may be redriven: its signals are kept for it.
		if run.Status.Terminal() && run.Status != checkpoint.StatusDead {
			return SignalResult{Run: run}, fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrNotActive)
		}
		if err := signalRoom(run, req); err != nil {
			return SignalResult{Run: run}, err
		}
		if err := c.declaresSignal(ctx, run, req.Name); err != nil {
			return SignalResult{Run: run}, err
		}
		now := time.Now().UTC()
		sig := checkpoint.Signal{Name: req.Name, ID: req.ID, Data: req.Data, By: req.By, Channel: req.Channel, At: now}
		next := run
		next.UpdatedAt = now
		next.Signals = append(append([]checkpoint.Signal(nil), run.Signals...), sig)
		next.Audit = append(append([]checkpoint.AuditEntry(nil), run.Audit...), checkpoint.AuditEntry{
			Kind: checkpoint.AuditSignal, Step: run.Step, At: now, By: req.By, Channel: req.Channel,
			Reason: fmt.Sprintf("signal %s (id %s, %d bytes)", req.Name, req.ID, len(req.Data)),
		})
		w := run.Wait
		resume := run.Status == checkpoint.StatusWaiting && w != nil && w.Kind == checkpoint.WaitSignal && w.Name == req.Name
		if resume {
			next.Status, next.Step, next.StepName, next.Wait = checkpoint.StatusRunning, w.Step, w.StepName, nil
			next.Resumes++
		}
		stored, err := c.store.UpdateRun(ctx, next)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue
		}
		if err != nil {
			return SignalResult{Run: run}, fmt.Errorf("signal %s to %s: %w", req.Name, req.RunID, err)
		}
		res := SignalResult{Run: stored, Signal: sig, Resumed: resume}
		if !resume {
			return res, nil
		}
		c.statusChanged(ctx, stored)
		if err := c.publish(ctx, stored, queue.ResumeMsgID(stored, queue.Signal)); err != nil {
			return res, fmt.Errorf("signal stored and run %s resumed, but its step was not published; the scheduler's repair publishes it: %w", stored.ID, err)
		}
		return res, nil
	}
}

// delivered finds a signal of req's id that run holds, pending or
// consumed, and whether it is req's (same name and data).
func delivered(run checkpoint.Run, req SignalRequest) (checkpoint.Signal, bool, bool) {
	for _, s := range run.Signals {
		if s.ID == req.ID && !s.Expired {
			return s, s.Name == req.Name && bytes.Equal(s.Data, req.Data), true
		}
	}
	for _, c := range run.Consumed {
		if c.ID == req.ID {
			return c.Signal(), c.Name == req.Name && c.DataSHA256 == checkpoint.SignalDataSHA256(req.Data), true
		}
	}
	return checkpoint.Signal{}, false, false
}

// signalRoom refuses a signal past the run's bounds on what is pending:
// pending signals live on the run record, which every step reads and a KV
// bucket caps at 1 MB. Consumed signals and expiry markers do not count.
func signalRoom(run checkpoint.Run, req SignalRequest) error {
	n, size := 0, len(req.Data)
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

// checkSignal validates req and fills in its id.
func checkSignal(req *SignalRequest) error {
	if !checkpoint.ValidSignalName(req.Name) {
		return fmt.Errorf("signal name %q: %w: use 1-64 letters, digits, '-' or '_'", req.Name, ErrBadSignal)
	}
	if len(req.Data) > checkpoint.MaxSignalBytes {
		return fmt.Errorf("signal %s: %w: %d bytes of data, at most %d (put large data in the blob store and send its reference)", req.Name, ErrBadSignal, len(req.Data), checkpoint.MaxSignalBytes)
	}
	if len(req.Data) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, req.Data); err != nil {
			return fmt.Errorf("signal %s: %w: data is not valid JSON: %v", req.Name, ErrBadSignal, err)
		}
		req.Data = buf.Bytes()
	}
	if req.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		req.ID = "sig-" + hex.EncodeToString(b[:])
	}
	if !checkpoint.ValidID(req.ID) {
		return fmt.Errorf("signal id %q: %w: use 1-128 letters, digits, '-' or '_'", req.ID, ErrBadSignal)
	}
	return nil
}

// declaresSignal checks that run's workflow version waits for signals of
// name, as its workers registered it.
func (c *Client) declaresSignal(ctx context.Context, run checkpoint.Run, name string) error {
	infos, err := c.store.Workflows(ctx)
	if err != nil {
		return fmt.Errorf("read registered workflows: %w", err)
	}
	for _, info := range infos {
		if info.Name == run.Workflow && info.Version == run.Version {
			if slices.Contains(info.Signals, name) {
				return nil
			}
			return fmt.Errorf("run %s (%s v%d) waits for signals %v, not %q: %w", run.ID, run.Workflow, run.Version, info.Signals, name, ErrUnknownSignal)
		}
	}
	return fmt.Errorf("run %s: no worker registered %s v%d, so its signals are unknown: %w", run.ID, run.Workflow, run.Version, ErrUnknownSignal)
}
