package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/transition"
)

// ErrNotDead: only a dead run can be redriven.
var ErrNotDead = transition.ErrNotDead

// Redrive puts a dead run back to work at the step it died in, with a fresh
// set of attempts. Completed steps are not run again and journaled calls
// are replayed, so effects already made are not made twice.
func (c *Client) Redrive(ctx context.Context, id, by string, opts ...ActionOption) (run checkpoint.Run, err error) {
	a := actionOf(opts)
	ctx, span := c.actionSpan(ctx, id, "durable.redrive", attribute.String("durable.by", by), attribute.String("durable.channel", a.channel))
	defer func() { endSpan(span, err) }()
	run, err = c.store.GetRun(ctx, id)
	if err != nil {
		return run, fmt.Errorf("run %s: %w", id, err)
	}
	if run.Status != checkpoint.StatusDead {
		return run, fmt.Errorf("run %s is %s: %w", id, run.Status, ErrNotDead)
	}
	before, err := c.checkpointBefore(ctx, run)
	if err != nil {
		return run, err
	}
	if before != nil && len(before.Children) > 0 {
		// Children the run waits for again are started while it is still
		// dead: one that can't start (bad input, a workflow no worker
		// registered) leaves it dead, not waiting for ever.
		if err := c.startChildRuns(ctx, run, *before); err != nil {
			return run, fmt.Errorf("run %s stays dead: %w", id, err)
		}
	}
	return c.change(ctx, id, transition.Redrive{By: by, Channel: a.channel, Before: before})
}

// checkpointBefore reads the checkpoint of the step before run's cursor,
// nil when there is none.
func (c *Client) checkpointBefore(ctx context.Context, run checkpoint.Run) (*checkpoint.Checkpoint, error) {
	if run.Step < 2 {
		return nil, nil
	}
	cp, err := c.store.Checkpoint(ctx, run.ID, run.Step-1)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s:%d: %w", run.ID, run.Step-1, err)
	}
	return &cp, nil
}

// publishFanOut carries out cmd: the branches of its fan-out without a
// checkpoint, or its join when all have one (a branch retried meanwhile
// may have committed after all, and a join can die on its own).
func (c *Client) publishFanOut(ctx context.Context, run checkpoint.Run, cmd transition.PublishFanOut) error {
	done, err := c.store.BranchCheckpoints(ctx, run.ID, run.Step, len(cmd.Checkpoint.FanOut.Branches))
	if err == nil {
		_, err = queue.PublishFanOut(ctx, c.js, run, cmd.Checkpoint, done, cmd.Suffix)
	}
	if err != nil {
		return fmt.Errorf("run %s set running but its branches were not published; the scheduler's stuck-run repair will publish them: %w", run.ID, err)
	}
	return nil
}

// DeadLetters lists the dead-letter stream, oldest first.
func (c *Client) DeadLetters(ctx context.Context) ([]queue.DeadLetter, error) {
	st, err := c.js.Stream(ctx, queue.DLQStream)
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []queue.DeadLetter
	if info.State.Msgs == 0 {
		return out, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted or expired
		}
		var dl queue.DeadLetter
		if json.Unmarshal(m.Data, &dl) == nil {
			out = append(out, dl)
		}
	}
	return out, nil
}

// InDeadLetters reports whether the dead-letter stream still holds a
// letter of run: one read of the newest message on its subject.
func (c *Client) InDeadLetters(ctx context.Context, run checkpoint.Run) (bool, error) {
	st, err := c.js.Stream(ctx, queue.DLQStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dead-letter stream: %w", err)
	}
	_, err = st.GetLastMsgForSubject(ctx, queue.DLQSubject(run.Workflow, run.ID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dead letter of %s: %w", run.ID, err)
	}
	return true, nil
}
