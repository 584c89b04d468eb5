package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/transition"
)

// StartChildren creates the child runs that checkpoint cp of parent lists
// and publishes their first steps. It is idempotent: a child that exists
// is started again only in the sense of Start (its first step published
// again while it is there). A child whose id another run holds is not
// started: ChildResults reports it failed, and its siblings go on. Then,
// since every child may have ended already (a redelivery after a crash,
// a batch of taken ids), it resumes the parent if so. The worker calls it
// after committing a step that started children.
func (c *Client) StartChildren(ctx context.Context, parent checkpoint.Run, cp checkpoint.Checkpoint) error {
	if err := c.startChildRuns(ctx, parent, cp); err != nil {
		return err
	}
	// A cancel of the parent that read no children yet must not leave
	// them running: the children are written, then the parent read (the
	// cancel writes the parent, then reads the children).
	now, err := c.store.GetRun(ctx, parent.ID)
	if err != nil {
		return fmt.Errorf("parent %s: %w", parent.ID, err)
	}
	if now.Status == checkpoint.StatusCancelled {
		return c.cancelChildren(ctx, now, "the cancel of "+parent.ID, cancelAction(now))
	}
	_, err = c.ResumeParent(ctx, parent.ID)
	return err
}

// startChildRuns creates the child runs checkpoint cp of parent lists
// (those that exist are left as they are) and publishes their first steps.
func (c *Client) startChildRuns(ctx context.Context, parent checkpoint.Run, cp checkpoint.Checkpoint) error {
	ref := &checkpoint.ParentRef{RunID: parent.ID, Step: cp.Step}
	for _, ch := range cp.Children {
		_, _, err := c.Start(ctx, StartRequest{Workflow: ch.Workflow, RunID: ch.ID, Input: ch.Input, By: "run " + parent.ID, Parent: ref})
		if errors.Is(err, ErrRunIDTaken) {
			continue
		}
		if err != nil {
			return fmt.Errorf("start child %s of %s: %w", ch.ID, parent.ID, err)
		}
	}
	return nil
}

// ChildEnded resumes the parent of run, if it has one and run has ended
// and every other child of the same step has too. The worker calls it
// when a run reaches a terminal status; Cancel does too.
func (c *Client) ChildEnded(ctx context.Context, run checkpoint.Run) error {
	if run.Parent == nil || !run.Status.Terminal() {
		return nil
	}
	_, err := c.ResumeParent(ctx, run.Parent.RunID)
	return err
}

// ResumeParent resumes run id if it waits for child runs and all of them
// have ended: a compare-and-set on the run, so of the children that end
// at once exactly one resumes it, and then its next step is published
// (id <run>:<n>:children<generation>). Every child that ends reads its siblings after
// its own end is stored, so the last to end sees all ended. It reports
// whether it resumed the run.
func (c *Client) ResumeParent(ctx context.Context, id string) (bool, error) {
	run, r, err := c.changeOf(ctx, id, func(run checkpoint.Run) (transition.Event, error) {
		if run.Status != checkpoint.StatusWaiting || run.Wait == nil || run.Wait.Kind != checkpoint.WaitChildren {
			return nil, nil
		}
		results, err := c.ChildResults(ctx, run, run.Wait.Step-1)
		if err != nil {
			return nil, err
		}
		for _, r := range results {
			if !r.Status.Terminal() {
				return nil, nil
			}
		}
		return transition.ChildrenEnded{Count: len(results)}, nil
	}, nil)
	// A store that failed stored nothing (no run comes back): resumed
	// is only what was stored.
	return r.Resumed && run.ID != "", err
}

// ChildStatus is how a child run stands, for ChildResults.
type ChildStatus struct {
	ID       string
	Workflow string
	Status   checkpoint.Status
	Error    string
	// Step is the child's cursor: its last step once it has ended.
	Step int
}

// ChildResults reads the child runs that step n of run started (its
// checkpoint lists them), in the order they were started. A child not
// created (yet, or at all: its start failed) has no status and the error
// "not started".
func (c *Client) ChildResults(ctx context.Context, run checkpoint.Run, n int) ([]ChildStatus, error) {
	cp, err := c.store.Checkpoint(ctx, run.ID, n)
	if err != nil {
		return nil, fmt.Errorf("children of %s:%d: %w", run.ID, n, err)
	}
	out := make([]ChildStatus, 0, len(cp.Children))
	for _, ch := range cp.Children {
		s := ChildStatus{ID: ch.ID, Workflow: ch.Workflow}
		child, err := c.store.GetRun(ctx, ch.ID)
		switch {
		case errors.Is(err, checkpoint.ErrNotFound):
			s.Error = "not started: no run has this id"
		case err != nil:
			return nil, fmt.Errorf("child %s of %s: %w", ch.ID, run.ID, err)
		case !childOf(child, run.ID, n):
			s.Status, s.Error = checkpoint.StatusFailed, fmt.Sprintf("not started: run id %s is taken by another run%s (give the child another id with steps.Child.ID)", ch.ID, parentNote(child.Parent))
		default:
			s.Status, s.Error, s.Step = child.Status, child.Error, child.Step
		}
		out = append(out, s)
	}
	return out, nil
}

// childOf says whether run is the child that step of parent started: a
// child of the same parent's earlier step (an id the workflow set twice)
// is not.
func childOf(run checkpoint.Run, parent string, step int) bool {
	return run.Parent != nil && run.Parent.RunID == parent && run.Parent.Step == step
}

// cancelAction is the action of run's cancel as its audit recorded it.
func cancelAction(run checkpoint.Run) action {
	a := action{channel: ChannelCLI}
	for _, e := range run.Audit {
		if e.Kind == checkpoint.AuditCancelled {
			a.channel = e.Channel
		}
	}
	return a
}

// cancelChildren cancels the children of run that have not ended, when
// run waits (or waited, until it was cancelled) for child runs at its
// cursor.
func (c *Client) cancelChildren(ctx context.Context, run checkpoint.Run, by string, a action) error {
	if run.Step < 2 {
		return nil
	}
	cp, err := c.store.Checkpoint(ctx, run.ID, run.Step-1)
	if errors.Is(err, checkpoint.ErrNotFound) || (err == nil && len(cp.Children) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("children of %s: %w", run.ID, err)
	}
	for _, ch := range cp.Children {
		child, err := c.store.GetRun(ctx, ch.ID)
		if errors.Is(err, checkpoint.ErrNotFound) || (err == nil && !childOf(child, run.ID, cp.Step)) {
			continue
		}
		if err != nil {
			return fmt.Errorf("child %s of %s: %w", ch.ID, run.ID, err)
		}
		if child.Status.Terminal() && child.Status != checkpoint.StatusCancelled {
			continue
		}
		if _, err := c.Cancel(ctx, ch.ID, by+" (parent "+run.ID+" cancelled)", Via(a.channel)); err != nil && !errors.Is(err, ErrNotActive) {
			return err
		}
	}
	return nil
}
