package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// ErrNotDead: only a dead run can be redriven.
var ErrNotDead = errors.New("run is not dead")

// Redrive puts a dead run back to work at the step it died in, with a fresh
// set of attempts. Completed steps are not run again and journaled calls
// are replayed, so effects already made are not made twice.
func (c *Client) Redrive(ctx context.Context, id, by string, opts ...ActionOption) (run checkpoint.Run, err error) {
	a := actionOf(opts)
	ctx, span := c.actionSpan(ctx, id, "durable.redrive", attribute.String("durable.by", by), attribute.String("durable.channel", a.channel))
	defer func() { endSpan(span, err) }()
	for {
		run, err := c.store.GetRun(ctx, id)
		if err != nil {
			return run, fmt.Errorf("run %s: %w", id, err)
		}
		if run.Status != checkpoint.StatusDead {
			return run, fmt.Errorf("run %s is %s: %w", id, run.Status, ErrNotDead)
		}
		// Children the run would wait for again are started while it is
		// still dead: one that can't start (bad input, a workflow no
		// worker registered) leaves it dead, not waiting for ever.
		if err := c.startChildrenOf(ctx, run); err != nil {
			return run, fmt.Errorf("run %s stays dead: %w", id, err)
		}
		now := time.Now().UTC()
		next := run
		next.Status, next.UpdatedAt = checkpoint.StatusRunning, now
		next.Redrives++
		next.Audit = append(append([]checkpoint.AuditEntry(nil), run.Audit...), checkpoint.AuditEntry{
			Kind: checkpoint.AuditRedriven, Step: run.Step, At: now, By: by, Channel: a.channel, Reason: "was dead: " + run.Error,
		})
		next.Error, next.FailedBranch = "", 0
		stored, err := c.store.UpdateRun(ctx, next)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue
		}
		if err != nil {
			return run, fmt.Errorf("redrive %s: %w", id, err)
		}
		c.statusChanged(ctx, stored) // before the redriven step's own events
		if err := c.publishRedrive(ctx, stored); err != nil {
			return stored, fmt.Errorf("run %s set running but its step was not published; the scheduler's stuck-run repair will publish it: %w", id, err)
		}
		return stored, nil
	}
}

// publishRedrive publishes the step a redriven run died in, or, at the
// join of a fan-out, its branches without a checkpoint (or the join when
// all have one: a branch retried meanwhile may have committed after all,
// and a join can die on its own).
func (c *Client) publishRedrive(ctx context.Context, run checkpoint.Run) error {
	if cp, err := c.store.Checkpoint(ctx, run.ID, run.Step-1); err == nil && len(cp.Children) > 0 {
		// The step before started children: the run waits for them again
		// (the ones that could not be started are started now).
		return c.rewaitChildren(ctx, run, cp)
	}
	fan, done, err := c.fanOutAt(ctx, run)
	if err != nil {
		return err
	}
	if fan != nil {
		_, err = queue.PublishFanOut(ctx, c.js, run, *fan, done, queue.Redrive.Suffix(run))
		return err
	}
	return c.publish(ctx, run, queue.ResumeMsgID(run, queue.Redrive))
}

// startChildrenOf starts the child runs the step before run's cursor
// started, if it started any (see StartChildren).
func (c *Client) startChildrenOf(ctx context.Context, run checkpoint.Run) error {
	if run.Step < 2 {
		return nil
	}
	cp, err := c.store.Checkpoint(ctx, run.ID, run.Step-1)
	if errors.Is(err, checkpoint.ErrNotFound) || (err == nil && len(cp.Children) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s:%d: %w", run.ID, run.Step-1, err)
	}
	return c.startChildRuns(ctx, run, cp)
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
