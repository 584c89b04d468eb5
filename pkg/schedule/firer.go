package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// Firer starts the runs of due schedules. Any number of firers (one per
// scheduler process) may run at once: each fire starts one run.
//
// A fire goes in two writes, as a step does (decide, store, then act):
//
//  1. The firer decides what the fire does (start, cancel the previous
//     run and start, or skip, from the overlap policy and the status of
//     the schedule's last run) and stores the decision on the schedule,
//     compare-and-set. Of firers deciding at once one wins; the others
//     read the schedule again and find the fire handled.
//  2. Any firer that reads a decision not yet carried out carries it out
//     (cancel, then client.Start with the fire's id, FireID), then clears
//     it, compare-and-set. Both are idempotent: a second firer, or the
//     same one after a crash, carries it out again harmlessly, and the
//     run id makes client.Start start one run.
//
// A decision whose start fails for a reason that passes (the store or
// NATS unavailable, the workflow not registered yet) stays, and is
// carried out by a later call, until it is older than the catch-up
// window: then the fire is Failed.
type Firer struct {
	store  *Store
	client *client.Client
	// perPass bounds the fires of one schedule one FireDue call decides.
	perPass int
}

// firerParallel bounds the schedules one FireDue call fires at once.
const firerParallel = 16

// firesPerPass bounds the fires one FireDue call decides for one
// schedule: a schedule catching up a week of minutes (CatchUpAll) takes
// many calls, and the other schedules' fires are not held up meanwhile.
const firesPerPass = 100

// NewFirer returns a firer of store's schedules, which starts and cancels
// runs with c.
func NewFirer(store *Store, c *client.Client) *Firer {
	return &Firer{store: store, client: c, perPass: firesPerPass}
}

// Report says what a FireDue call did.
type Report struct {
	// Fires handled by this call, by schedule and time. A fire handled by
	// another firer at once is in that firer's report, not this one's.
	Fires []Fire
	// Next is the earliest fire after now of the unpaused schedules (zero
	// when there is none), or now when a schedule owes more fires than
	// one call decides: the time to call FireDue again, at the latest.
	// Call it every few seconds anyway, to see schedules created, resumed
	// and changed by other processes.
	Next time.Time
}

// FireDue fires every unpaused schedule that owes fires at now (see
// Schedule.Due), oldest first, and carries out the fires decided before
// and not yet done. It reads every schedule once (one pass over the
// bucket), then each due one again to change it. What failed for one
// schedule does not stop the others: the error joins the failures, and
// the report has what went through.
func (f *Firer) FireDue(ctx context.Context, now time.Time) (Report, error) {
	now = now.UTC()
	all, err := f.store.list(ctx)
	if err != nil {
		return Report{}, err
	}
	var (
		rep  Report
		errs []error
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, firerParallel)
		// behind: a schedule owes more fires than one call decides.
		behind bool
	)
	for _, r := range all {
		if next := r.nextAfter(now); !next.IsZero() && (rep.Next.IsZero() || next.Before(rep.Next)) {
			rep.Next = next
		}
		if r.Pending == nil && len(r.Due(now)) == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fires, more, err := f.fire(ctx, r, now, nil)
			mu.Lock()
			defer mu.Unlock()
			rep.Fires = append(rep.Fires, fires...)
			behind = behind || more
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if behind {
		rep.Next = now // call again at once
	}
	return rep, errors.Join(errs...)
}

// TriggerOption qualifies a trigger (Firer.Trigger).
type TriggerOption func(*trigger)

// trigger is an operator's trigger: when, and by whom.
type trigger struct {
	at time.Time
	by string
}

// By records who triggers: on the fire (Fire.By), and as who started its
// run (checkpoint.Run.StartedBy, which a four-eyes approver is compared
// with; without By it is "schedule:<name>", as a fire's). A cancel the
// trigger makes (OverlapCancelPrevious) is recorded as by who, too.
func By(who string) TriggerOption {
	return func(t *trigger) { t.by = who }
}

// decision is what the trigger proposes for schedule name.
func (t *trigger) decision(name string) *pending {
	return &pending{At: t.at, RunID: triggerID(name, t.at), Trigger: true, By: t.by}
}

// Trigger fires schedule name once at now, whatever its expression says
// and even while it is paused, under its overlap policy: the run's id is
// "<name>-<now to the second>" (never a fire's id), so triggers in the
// same second start one run. It leaves the schedule's last fire time, and
// so what the expression owes.
func (f *Firer) Trigger(ctx context.Context, name string, now time.Time, opts ...TriggerOption) (Fire, error) {
	r, err := f.store.get(ctx, name)
	if err != nil {
		return Fire{}, err
	}
	t := &trigger{at: now.UTC().Truncate(time.Second)}
	for _, o := range opts {
		o(t)
	}
	at := t.at
	fires, _, err := f.fire(ctx, r, now.UTC(), t)
	if err != nil {
		return Fire{}, err
	}
	id := triggerID(name, at)
	for _, fi := range fires {
		if fi.Trigger && fi.RunID == id {
			return fi, nil
		}
	}
	// Another firer carried the decision out first: read what it did.
	if r, err = f.store.get(ctx, name); err != nil {
		return Fire{}, err
	}
	if last := r.State.Last; last != nil && last.RunID == id {
		return *last, nil
	}
	return Fire{}, fmt.Errorf("schedule %s: the trigger at %s was overtaken by other fires; see the run %s", name, at.Format(time.RFC3339), id)
}

// fire carries out r's pending decision if any, then decides and carries
// out the fires r owes at now one by one (at most perPass: more says some
// are left for the next call), reading r again after each conflict, until
// none is left. With t, it decides and carries out that trigger instead
// of the fires owed.
func (f *Firer) fire(ctx context.Context, r record, now time.Time, t *trigger) (fires []Fire, more bool, err error) {
	triggering := t != nil
	due, decided := r.Due(now), 0 // what r owes, computed once a read of r
	for ctx.Err() == nil {
		var fi *Fire
		switch {
		case r.Pending != nil:
			fi, err = f.carryOut(ctx, &r, now)
		case t != nil:
			if fi, err = f.decide(ctx, &r, t.decision(r.Spec.Name)); err == nil {
				t = nil
			}
		case triggering || len(due) == 0:
			return fires, false, nil
		case decided == f.perPass:
			return fires, true, nil
		default:
			if fi, err = f.decide(ctx, &r, &pending{At: due[0], RunID: FireID(r.Spec.Name, due[0])}); err == nil {
				due, decided = due[1:], decided+1
			}
		}
		if fi != nil {
			fires = append(fires, *fi)
		}
		if errors.Is(err, errConflict) {
			if r, err = f.store.get(ctx, r.Spec.Name); errors.Is(err, ErrNotFound) {
				return fires, false, nil // deleted meanwhile
			}
			due = r.Due(now)
		}
		if err != nil {
			return fires, false, err
		}
	}
	return fires, false, ctx.Err()
}

// decide decides the fire p proposes (a fire of the expression, or a
// trigger) under r's overlap policy and stores the decision
// compare-and-set: a skip as r's last fire (returned), a start as r's
// pending fire, for carryOut.
func (f *Firer) decide(ctx context.Context, r *record, p *pending) (*Fire, error) {
	name := r.Spec.Name
	prev := r.State.LastRunID
	if prev != "" && prev != p.RunID {
		status, err := f.activeStatus(ctx, prev)
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", name, err)
		}
		switch {
		case status == "":
		case r.Spec.Overlap == OverlapCancelPrevious:
			p.Cancel = prev
		case r.Spec.Overlap == OverlapSkip:
			return f.skip(ctx, r, p, fmt.Sprintf("the previous run %s is still %s", prev, status))
		}
	}
	if !p.Trigger {
		r.State.LastFire = p.At
	}
	r.Pending = p
	return nil, f.store.put(ctx, r)
}

// skip stores the fire p as skipped.
func (f *Firer) skip(ctx context.Context, r *record, p *pending, reason string) (*Fire, error) {
	fi := &Fire{Schedule: r.Spec.Name, At: p.At, RunID: p.RunID, Result: Skipped, Trigger: p.Trigger, By: p.By, Reason: reason}
	if !p.Trigger {
		r.State.LastFire = p.At
	}
	r.State.Last = fi
	if err := f.store.put(ctx, r); err != nil {
		return nil, err
	}
	return fi, nil
}

// activeStatus is the status of run id while it has not ended, "" once
// it has (or is gone: purged, or never started).
func (f *Firer) activeStatus(ctx context.Context, id string) (checkpoint.Status, error) {
	run, err := f.client.Store().GetRun(ctx, id)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read previous run %s: %w", id, err)
	case run.Status.Terminal():
		return "", nil
	}
	return run.Status, nil
}

// carryOut carries out r's pending fire (cancel, start) and clears it,
// compare-and-set. A start refused for good, or failing for longer than
// the catch-up window, makes the fire Failed; one failing for a reason
// that may pass leaves it pending and returns the error. It returns the
// fire when this firer's write cleared it.
func (f *Firer) carryOut(ctx context.Context, r *record, now time.Time) (*Fire, error) {
	p := r.Pending
	fi := &Fire{Schedule: r.Spec.Name, At: p.At, RunID: p.RunID, Result: Started, Trigger: p.Trigger, By: p.By, Cancelled: p.Cancel}
	err := f.start(ctx, r.Spec, p)
	switch {
	case err == nil:
		r.State.LastRunID = p.RunID
	case errors.Is(err, client.ErrBadInput) || errors.Is(err, client.ErrRunIDTaken) || errors.Is(err, client.ErrBadRunID):
		fi.Result, fi.Reason = Failed, err.Error()
	case now.Sub(p.At) >= r.Spec.CatchUpWindow:
		fi.Result, fi.Reason = Failed, fmt.Sprintf("not started within the catch-up window (%s): %v", r.Spec.CatchUpWindow, err)
	default:
		return nil, fmt.Errorf("schedule %s: fire %s: %w", r.Spec.Name, p.RunID, err)
	}
	r.Pending, r.State.Last = nil, fi
	if err := f.store.put(ctx, r); err != nil {
		return nil, err
	}
	return fi, nil
}

// start cancels the run p replaces, if any, and starts p's run, as done
// by who triggered p, else by the schedule.
func (f *Firer) start(ctx context.Context, sp Spec, p *pending) error {
	by := "schedule:" + sp.Name
	if p.By != "" {
		by = p.By
	}
	if p.Cancel != "" {
		_, err := f.client.Cancel(ctx, p.Cancel, by, client.Via(client.ChannelScheduler))
		if err != nil && !errors.Is(err, client.ErrNotActive) && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("cancel previous run %s: %w", p.Cancel, err)
		}
	}
	_, _, err := f.client.Start(ctx, client.StartRequest{Workflow: sp.Workflow, RunID: p.RunID, Input: sp.Input, By: by})
	return err
}
