// Package scheduleops is what an operator does to schedules, whichever
// way they come: `durable schedule` (internal/cli) and the approver's
// /api/schedules (internal/approver) both call it, so that the two
// validate, refuse and answer alike, in one JSON shape (schedule.View).
//
//	ops := scheduleops.Ops{Store: st, Client: cl}
//	v, warning, err := ops.Create(ctx, spec, "ana")
//	out, err := ops.Do(ctx, scheduleops.Trigger, "nightly", "ana")
//
// What it refuses wraps pkg/schedule's sentinels (ErrBadSpec, ErrExists,
// ErrTooMany, ErrNotFound) or ErrNotStarted; each caller maps them to its
// own answers (exit codes, HTTP statuses).
package scheduleops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
)

// ErrNotStarted: a trigger was decided, but its run could not be started
// for good (its input or id refused): the fire is recorded as failed.
var ErrNotStarted = errors.New("the trigger's run was not started")

// Action is a change an operator makes to one schedule.
type Action string

// The actions of Do.
const (
	Pause   Action = "pause"
	Resume  Action = "resume"
	Delete  Action = "delete"
	Trigger Action = "trigger"
)

// ParseAction returns the action named s, false when there is none.
func ParseAction(s string) (Action, bool) {
	a := Action(s)
	return a, slices.Contains([]Action{Pause, Resume, Delete, Trigger}, a)
}

// Deleted is the answer to a delete.
type Deleted struct {
	Deleted string `json:"deleted"`
}

// Ops does operators' work on the schedules of Store; Client starts (and,
// for OverlapCancelPrevious, cancels) the runs of triggers.
type Ops struct {
	Store  *schedule.Store
	Client *client.Client
}

// List returns every schedule as of now, by name; never nil.
func (o Ops) List(ctx context.Context) ([]schedule.View, error) {
	all, err := o.Store.List(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]schedule.View, 0, len(all))
	for _, sc := range all {
		out = append(out, sc.ViewAt(now))
	}
	return out, nil
}

// Get returns schedule name (schedule.ErrNotFound when there is none).
func (o Ops) Get(ctx context.Context, name string) (schedule.View, error) {
	sc, err := o.Store.Get(ctx, name)
	if err != nil {
		return schedule.View{}, err
	}
	return sc.ViewAt(time.Now()), nil
}

// Create validates spec and stores it as a new schedule made by by. The
// warning is not empty when no worker has registered its workflow yet:
// the schedule is kept (its workers may start later), but its fires are
// retried, then fail, until one does.
func (o Ops) Create(ctx context.Context, spec schedule.Spec, by string) (v schedule.View, warning string, err error) {
	if err := spec.Validate(); err != nil {
		return v, "", err
	}
	sc, err := o.Store.Create(ctx, spec, by)
	if err != nil {
		return v, "", err
	}
	return sc.ViewAt(time.Now()), o.unregistered(ctx, sc.Spec.Workflow), nil
}

// unregistered is the warning for a workflow no worker has registered,
// "" when one has (or the registrations can't be read: no warning).
func (o Ops) unregistered(ctx context.Context, workflow string) string {
	infos, err := o.Client.Store().Workflows(ctx)
	if err != nil {
		return ""
	}
	var names []string
	for _, info := range infos {
		if info.Name == workflow {
			return ""
		}
		if !slices.Contains(names, info.Name) {
			names = append(names, info.Name)
		}
	}
	slices.Sort(names)
	return fmt.Sprintf("no worker has registered workflow %q (registered: %v); its fires are retried until one does, for the catch-up window", workflow, names)
}

// Do carries out action on schedule name, recorded as done by by (a
// trigger's fire and run too: schedule.By). It
// returns the schedule after a pause or resume (schedule.View), Deleted
// after a delete, and the fire of a trigger (schedule.Fire: started, or
// skipped by the overlap policy; failed comes with ErrNotStarted).
// Pausing a paused schedule, or resuming an active one, changes nothing.
func (o Ops) Do(ctx context.Context, action Action, name, by string) (any, error) {
	switch action {
	case Pause, Resume:
		change := o.Store.Pause
		if action == Resume {
			change = o.Store.Resume
		}
		sc, err := change(ctx, name, by)
		if err != nil {
			return nil, err
		}
		return sc.ViewAt(time.Now()), nil
	case Delete:
		if err := o.Store.Delete(ctx, name); err != nil {
			return nil, err
		}
		return Deleted{Deleted: name}, nil
	case Trigger:
		fire, err := schedule.NewFirer(o.Store, o.Client).Trigger(ctx, name, time.Now(), schedule.By(by))
		if err == nil && fire.Result == schedule.Failed {
			err = fmt.Errorf("schedule %s: run %s: %w: %s", name, fire.RunID, ErrNotStarted, fire.Reason)
		}
		return fire, err
	}
	return nil, fmt.Errorf("schedule %s: unknown action %q: want pause, resume, delete or trigger", name, action)
}
