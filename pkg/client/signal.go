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

	"go.opentelemetry.io/otel/attribute"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/transition"
)

// Bounds of the pending signals a run keeps (they live on its record
// until a step consumes them).
const (
	MaxSignalsPerRun     = transition.MaxSignalsPerRun
	MaxSignalBytesPerRun = transition.MaxSignalBytesPerRun
)

var (
	// ErrBadSignal: a signal's name, id or data is malformed or too large.
	ErrBadSignal = errors.New("bad signal")
	// ErrTooManySignals: the run keeps MaxSignalsPerRun pending signals,
	// or MaxSignalBytesPerRun bytes of their data, already.
	ErrTooManySignals = transition.ErrTooManySignals
	// ErrSignalIDReused: a signal id was delivered before with another
	// name or other data.
	ErrSignalIDReused = transition.ErrSignalIDReused
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
	ev := transition.Signal{Signal: checkpoint.Signal{Name: req.Name, ID: req.ID, Data: req.Data, By: req.By, Channel: req.Channel}}
	declared := func(run checkpoint.Run) error { return c.declaresSignal(ctx, run, req.Name) }
	run, r, err := c.changeChecked(ctx, req.RunID, ev, declared)
	res := SignalResult{Run: run}
	if s, _, ok := transition.Delivered(run, req.ID, req.Name, req.Data); ok {
		res.Signal, res.Duplicate, res.Resumed = s, r.Err == nil && !r.Store, r.Resumed
	}
	return res, err
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
