package schedule_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
	"github.com/durable-run/durable/pkg/steps"
)

type state struct {
	N int `json:"n"`
}

// tick completes at once.
func tick() *steps.Workflow[state] {
	return steps.New[state]("tick", 1).
		Step("done", func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
			return steps.Complete(st), nil
		})
}

// hold parks for an approval by group ops, and completes once approved:
// a run that stays not ended until the test says.
func hold() *steps.Workflow[state] {
	return steps.New[state]("hold", 1).
		Step("ask", func(_ context.Context, s *steps.Context, st state) (steps.Outcome[state], error) {
			req := steps.ApprovalRequest{Group: "ops", TTL: time.Hour, Payload: map[string]string{"run": s.RunID()}}
			d, err := s.Approval(req)
			if err != nil {
				return steps.Outcome[state]{}, err
			}
			if d == nil {
				return steps.Park[state](req), nil
			}
			return steps.Complete(st), nil
		})
}

// env is a deployment for firers: NATS, a checkpoint store of one kind,
// a worker running tick and hold, and the test's clock.
type env struct {
	t     *testing.T
	f     *testfleet.Fleet
	clock *clock
	store *schedule.Store
	firer *schedule.Firer
}

func newEnv(t *testing.T, kind string) *env {
	f := testfleet.New(t, kind)
	f.StartWorker(steps.NewRegistry().MustRegister(tick(), hold()), nil)
	c := newClock("2026-12-04T09:59:30Z")
	st := newStore(t, f.JS, c, schedule.StoreOptions{})
	return &env{t: t, f: f, clock: c, store: st, firer: schedule.NewFirer(st, f.Client)}
}

// otherFirer is a firer of another process: its own NATS connection,
// schedule store and client, on the same servers.
func (e *env) otherFirer() *schedule.Firer {
	nc, err := nats.Connect(e.f.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return schedule.NewFirer(newStore(e.t, js, e.clock, schedule.StoreOptions{}), client.New(js, e.f.Store))
}

func (e *env) create(spec schedule.Spec) {
	e.t.Helper()
	if _, err := e.store.Create(ctxT(e.t), spec, "test"); err != nil {
		e.t.Fatal(err)
	}
}

// fireDue fires at now and fails the test on an error.
func (e *env) fireDue(now time.Time) []schedule.Fire {
	e.t.Helper()
	rep, err := e.firer.FireDue(ctxT(e.t), now)
	if err != nil {
		e.t.Fatalf("FireDue at %s: %v", now, err)
	}
	return rep.Fires
}

// runIDs lists the runs of workflow, sorted.
func (e *env) runIDs(workflow string) []string {
	e.t.Helper()
	runs, err := e.f.Store.ListRuns(ctxT(e.t), checkpoint.Filter{Workflow: workflow})
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

func (e *env) get(name string) schedule.Schedule {
	e.t.Helper()
	s, err := e.store.Get(ctxT(e.t), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func minute(m int) time.Time { return utc("2026-12-04T10:00:00Z").Add(time.Duration(m) * time.Minute) }

// fireIDs are the fire ids of name at the minutes.
func fireIDs(name string, minutes ...int) []string {
	var ids []string
	for _, m := range minutes {
		ids = append(ids, schedule.FireID(name, minute(m)))
	}
	slices.Sort(ids)
	return ids
}

// Two firers (two scheduler processes) fire over ten simulated minutes,
// at the same moments, and both skip the same minutes (an outage): every
// fire starts exactly one run, with the id of its fire time, and exactly
// one firer reports it. "every" catches up its newest missed fire only
// (CatchUpLast), "batch" each of them (CatchUpAll).
func TestFireRace(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind)
			e.create(schedule.Spec{Name: "every", Workflow: "tick", Cron: "* * * * *", Overlap: schedule.OverlapAllow})
			e.create(schedule.Spec{Name: "batch", Workflow: "tick", Cron: "* * * * *", Overlap: schedule.OverlapAllow, CatchUp: schedule.CatchUpAll, CatchUpWindow: time.Hour})
			firers := []*schedule.Firer{e.firer, e.otherFirer(), e.otherFirer()}

			reported := map[string]int{}
			var mu sync.Mutex
			for _, m := range []int{0, 1, 2, 5, 6, 9} { // no firer ran at 3, 4, 7, 8
				var wg sync.WaitGroup
				for i, fr := range firers {
					now := minute(m).Add(time.Duration(i) * 300 * time.Millisecond)
					wg.Go(func() {
						rep, err := fr.FireDue(ctxT(t), now)
						if err != nil {
							t.Errorf("firer %d at %s: %v", i, now, err)
						}
						mu.Lock()
						defer mu.Unlock()
						for _, fi := range rep.Fires {
							if fi.Result != schedule.Started || fi.RunID != schedule.FireID(fi.Schedule, fi.At) {
								t.Errorf("fire %+v", fi)
							}
							reported[fi.RunID]++
						}
					})
				}
				wg.Wait()
			}

			wantEvery := fireIDs("every", 0, 1, 2, 5, 6, 9)
			wantBatch := fireIDs("batch", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
			want := append(slices.Clone(wantBatch), wantEvery...)
			slices.Sort(want)
			if got := e.runIDs("tick"); !slices.Equal(got, want) {
				t.Errorf("runs %v\nwant %v", got, want)
			}
			for _, id := range want {
				if reported[id] != 1 {
					t.Errorf("fire %s reported %d times", id, reported[id])
				}
				e.f.WaitStatus(id, checkpoint.StatusCompleted, 30*time.Second)
			}
			if len(reported) != len(want) {
				t.Errorf("%d fires reported, want %d: %v", len(reported), len(want), reported)
			}
			if s := e.get("every"); !s.State.LastFire.Equal(minute(9)) || s.State.LastRunID != schedule.FireID("every", minute(9)) {
				t.Errorf("state %+v", s.State)
			}
		})
	}
}

// The overlap policies with real runs that stay waiting: skip starts
// nothing while the previous run is not ended, allow starts beside it,
// cancel-previous cancels it and starts.
func TestOverlap(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind)
			for _, o := range []schedule.Overlap{schedule.OverlapSkip, schedule.OverlapAllow, schedule.OverlapCancelPrevious} {
				e.create(schedule.Spec{Name: string(o), Workflow: "hold", Cron: "* * * * *", Overlap: o})
			}
			skip, allow, cancel := string(schedule.OverlapSkip), string(schedule.OverlapAllow), string(schedule.OverlapCancelPrevious)
			id := schedule.FireID

			if fires := e.fireDue(minute(0).Add(time.Second)); len(fires) != 3 {
				t.Fatalf("first fires %+v", fires)
			}
			for _, name := range []string{skip, allow, cancel} {
				e.f.WaitStatus(id(name, minute(0)), checkpoint.StatusWaiting, 30*time.Second)
			}

			fires := byName(e.fireDue(minute(1).Add(time.Second)))
			if f := fires[skip]; f.Result != schedule.Skipped || !strings.Contains(f.Reason, id(skip, minute(0))+" is still waiting") {
				t.Errorf("skip %+v", f)
			}
			if f := fires[allow]; f.Result != schedule.Started || f.RunID != id(allow, minute(1)) {
				t.Errorf("allow %+v", f)
			}
			if f := fires[cancel]; f.Result != schedule.Started || f.Cancelled != id(cancel, minute(0)) {
				t.Errorf("cancel-previous %+v", f)
			}
			if got := e.get(skip).State; !got.LastFire.Equal(minute(1)) || got.LastRunID != id(skip, minute(0)) || got.Last.Result != schedule.Skipped {
				t.Errorf("skip state %+v", got)
			}
			e.f.WaitStatus(id(cancel, minute(0)), checkpoint.StatusCancelled, 30*time.Second)
			e.f.WaitStatus(id(cancel, minute(1)), checkpoint.StatusWaiting, 30*time.Second)
			e.f.WaitStatus(id(allow, minute(1)), checkpoint.StatusWaiting, 30*time.Second)
			if r := e.f.Get(id(allow, minute(0))); r.Status != checkpoint.StatusWaiting {
				t.Errorf("allow's first run %s", r.Status)
			}

			// Skip's run ends: its next fire starts.
			if _, err := e.f.Client.Decide(ctxT(t), client.Decision{RunID: id(skip, minute(0)), By: "lead"}); err != nil {
				t.Fatal(err)
			}
			e.f.WaitStatus(id(skip, minute(0)), checkpoint.StatusCompleted, 30*time.Second)
			fires = byName(e.fireDue(minute(2).Add(time.Second)))
			if f := fires[skip]; f.Result != schedule.Started || f.RunID != id(skip, minute(2)) {
				t.Errorf("skip after the end %+v", f)
			}
			if f := fires[cancel]; f.Result != schedule.Started || f.Cancelled != id(cancel, minute(1)) {
				t.Errorf("cancel-previous again %+v", f)
			}
			e.f.WaitStatus(id(cancel, minute(1)), checkpoint.StatusCancelled, 30*time.Second)

			for name, want := range map[string][]string{
				skip:   fireIDs(skip, 0, 2),
				allow:  fireIDs(allow, 0, 1, 2),
				cancel: fireIDs(cancel, 0, 1, 2),
			} {
				var got []string
				for _, r := range e.runIDs("hold") {
					if strings.HasPrefix(r, name+"-2026") {
						got = append(got, r)
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s runs %v, want %v", name, got, want)
				}
			}
		})
	}
}

func byName(fires []schedule.Fire) map[string]schedule.Fire {
	m := map[string]schedule.Fire{}
	for _, f := range fires {
		m[f.Schedule] = f
	}
	return m
}

// A paused schedule fires nothing and, resumed, owes nothing from while
// it was paused; a trigger fires it anyway, once a second.
func TestPauseTrigger(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind)
			e.create(schedule.Spec{Name: "p", Workflow: "tick", Cron: "* * * * *", CatchUp: schedule.CatchUpAll, CatchUpWindow: time.Hour})
			ctx := ctxT(t)
			if fires := e.fireDue(minute(0).Add(time.Second)); len(fires) != 1 {
				t.Fatalf("fires %+v", fires)
			}
			// Ended, so that the overlap policy (skip) lets the trigger start.
			e.f.WaitStatus(schedule.FireID("p", minute(0)), checkpoint.StatusCompleted, 30*time.Second)
			e.clock.Set(minute(0).Add(10 * time.Second))
			if _, err := e.store.Pause(ctx, "p", "ops"); err != nil {
				t.Fatal(err)
			}
			for m := 1; m <= 3; m++ {
				if fires := e.fireDue(minute(m).Add(time.Second)); len(fires) != 0 {
					t.Errorf("paused, minute %d: %+v", m, fires)
				}
			}

			// A trigger while paused; again in the same second: one run.
			at := minute(3).Add(13*time.Second + 400*time.Millisecond)
			for i := range 2 {
				fi, err := e.firer.Trigger(ctx, "p", at.Add(time.Duration(i)*300*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Result != schedule.Started || !fi.Trigger || fi.RunID != "p-20261204T100313Z" {
					t.Errorf("trigger %d: %+v", i, fi)
				}
			}
			e.f.WaitStatus("p-20261204T100313Z", checkpoint.StatusCompleted, 30*time.Second)
			if s := e.get("p"); !s.State.LastFire.Equal(minute(0)) || s.State.LastRunID != "p-20261204T100313Z" {
				t.Errorf("after the trigger %+v", s.State)
			}

			e.clock.Set(minute(3).Add(30 * time.Second))
			if _, err := e.store.Resume(ctx, "p", "ops"); err != nil {
				t.Fatal(err)
			}
			// Minutes 1-3 passed while paused: only minute 4 is owed.
			if fires := e.fireDue(minute(4).Add(time.Second)); len(fires) != 1 || fires[0].RunID != schedule.FireID("p", minute(4)) {
				t.Errorf("after resume %+v", fires)
			}
			want := append(fireIDs("p", 0, 4), "p-20261204T100313Z")
			slices.Sort(want)
			if got := e.runIDs("tick"); !slices.Equal(got, want) {
				t.Errorf("runs %v, want %v", got, want)
			}
			if _, err := e.firer.Trigger(ctx, "missing", minute(5)); !errors.Is(err, schedule.ErrNotFound) {
				t.Errorf("trigger of a missing schedule: %v", err)
			}
		})
	}
}

// A trigger obeys the overlap policy: under skip, not beside a run that
// has not ended.
func TestTriggerSkip(t *testing.T) {
	e := newEnv(t, "kv")
	e.create(schedule.Spec{Name: "h", Workflow: "hold", Cron: "0 2 * * *"})
	first, err := e.firer.Trigger(ctxT(t), "h", minute(0))
	if err != nil || first.Result != schedule.Started {
		t.Fatalf("first trigger %+v, %v", first, err)
	}
	second, err := e.firer.Trigger(ctxT(t), "h", minute(0).Add(30*time.Second))
	if err != nil || second.Result != schedule.Skipped || !strings.Contains(second.Reason, first.RunID) {
		t.Errorf("second trigger %+v, %v", second, err)
	}
}

// Deleting a schedule stops its fires and leaves its runs; its name is
// free for a new schedule, which owes nothing from before it.
func TestDelete(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind)
			e.create(schedule.Spec{Name: "d", Workflow: "tick", Cron: "* * * * *"})
			e.fireDue(minute(0).Add(time.Second))
			if err := e.store.Delete(ctxT(t), "d"); err != nil {
				t.Fatal(err)
			}
			if fires := e.fireDue(minute(1).Add(time.Second)); len(fires) != 0 {
				t.Errorf("fires after delete %+v", fires)
			}
			e.clock.Set(minute(1).Add(30 * time.Second))
			e.create(schedule.Spec{Name: "d", Workflow: "tick", Cron: "* * * * *", Input: json.RawMessage(`{"n": 2}`)})
			if fires := e.fireDue(minute(2).Add(time.Second)); len(fires) != 1 {
				t.Errorf("fires of the new schedule %+v", fires)
			}
			if got, want := e.runIDs("tick"), fireIDs("d", 0, 2); !slices.Equal(got, want) {
				t.Errorf("runs %v, want %v", got, want)
			}
			if r := e.f.WaitStatus(schedule.FireID("d", minute(2)), checkpoint.StatusCompleted, 30*time.Second); string(r.Input) != `{"n":2}` {
				t.Errorf("input %s", r.Input)
			}
		})
	}
}

// A firer that stored its decision and died before starting the run:
// the next firer starts it, once.
func TestCrashAfterDecision(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind)
			e.create(schedule.Spec{Name: "c", Workflow: "tick", Cron: "* * * * *"})
			if err := e.firer.DecideOnly(ctxT(t), "c", minute(0)); err != nil {
				t.Fatal(err)
			}
			if ids := e.runIDs("tick"); len(ids) != 0 {
				t.Fatalf("runs before the carry-out %v", ids)
			}
			other := e.otherFirer()
			rep, err := other.FireDue(ctxT(t), minute(0).Add(5*time.Second))
			if err != nil || len(rep.Fires) != 1 || rep.Fires[0].RunID != schedule.FireID("c", minute(0)) || rep.Fires[0].Result != schedule.Started {
				t.Fatalf("fires %+v, %v", rep.Fires, err)
			}
			if !rep.Next.Equal(minute(1)) {
				t.Errorf("next %s", rep.Next)
			}
			if fires := e.fireDue(minute(0).Add(10 * time.Second)); len(fires) != 0 {
				t.Errorf("fired again %+v", fires)
			}
			e.f.WaitStatus(schedule.FireID("c", minute(0)), checkpoint.StatusCompleted, 30*time.Second)
		})
	}
}

// A start refused for good fails the fire at once; one failing for a
// reason that may pass (no worker registered the workflow) is retried by
// later calls until the catch-up window is over, then fails.
func TestStartFailures(t *testing.T) {
	e := newEnv(t, "redis")
	ctx := ctxT(t)
	// A run of another input holds the fire's id.
	if _, _, err := e.f.Client.Start(ctx, client.StartRequest{Workflow: "tick", RunID: schedule.FireID("taken", minute(0)), Input: json.RawMessage(`{"n":7}`)}); err != nil {
		t.Fatal(err)
	}
	e.create(schedule.Spec{Name: "taken", Workflow: "tick", Cron: "* * * * *"})
	e.create(schedule.Spec{Name: "ghost", Workflow: "nope", Cron: "* * * * *", CatchUpWindow: 2 * time.Minute})

	rep, err := e.firer.FireDue(ctx, minute(0).Add(time.Second))
	if !errors.Is(err, client.ErrUnknownWorkflow) || !strings.Contains(err.Error(), "schedule ghost: fire ghost-20261204T1000Z") {
		t.Errorf("error %v", err)
	}
	if len(rep.Fires) != 1 || rep.Fires[0].Schedule != "taken" || rep.Fires[0].Result != schedule.Failed || !strings.Contains(rep.Fires[0].Reason, "run id taken") {
		t.Errorf("fires %+v", rep.Fires)
	}
	if s := e.get("taken"); s.State.Last == nil || s.State.Last.Result != schedule.Failed || s.State.LastRunID != "" {
		t.Errorf("taken's state %+v", s.State)
	}

	// A minute later the ghost's first fire is still retried, and blocks
	// its next.
	rep, err = e.firer.FireDue(ctx, minute(1).Add(time.Second))
	if !errors.Is(err, client.ErrUnknownWorkflow) || strings.Contains(err.Error(), "1001Z") {
		t.Errorf("error %v", err)
	}
	if f := byName(rep.Fires)["ghost"]; f.Schedule != "" {
		t.Errorf("ghost fired %+v", f)
	}
	// Past the window it fails, and the newest fire is tried.
	rep, err = e.firer.FireDue(ctx, minute(2).Add(time.Second))
	if f := byName(rep.Fires)["ghost"]; f.Result != schedule.Failed || f.At != minute(0) || !strings.Contains(f.Reason, "not started within the catch-up window (2m0s): ") {
		t.Errorf("ghost %+v", f)
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("fire %s", schedule.FireID("ghost", minute(2)))) {
		t.Errorf("error %v", err)
	}
}

// A trigger on a whole minute is not that minute's fire: its run has an
// id of its own, and the fire still starts the run it owes (review of
// this package: "p-…T1001Z" named both, so the fire found the trigger's
// run and started nothing).
func TestTriggerOnTheMinuteIsNotTheFire(t *testing.T) {
	e := newEnv(t, "kv")
	e.create(schedule.Spec{Name: "m", Workflow: "tick", Cron: "* * * * *", Overlap: schedule.OverlapAllow})
	fi, err := e.firer.Trigger(ctxT(t), "m", minute(1))
	if err != nil || fi.Result != schedule.Started {
		t.Fatalf("trigger: %+v, %v", fi, err)
	}
	if fi.RunID == schedule.FireID("m", minute(1)) {
		t.Fatalf("the trigger at %s took the id of that minute's fire, %s", minute(1), fi.RunID)
	}
	fires := e.fireDue(minute(1).Add(time.Second))
	if len(fires) != 1 || fires[0].RunID != schedule.FireID("m", minute(1)) || fires[0].Result != schedule.Started {
		t.Fatalf("the minute's fire after the trigger: %+v", fires)
	}
	if got := e.runIDs("tick"); len(got) != 2 {
		t.Fatalf("runs %v, want the trigger's and the fire's", got)
	}
}

// A schedule catching up many missed fires (CatchUpAll) decides at most
// a pass's worth per FireDue call and says to call again at once, so the
// other schedules' fires are not held up; every fire still starts one run
// (review of this package: one call decided them all, re-reading what
// was owed before each).
func TestCatchUpIsBoundedPerCall(t *testing.T) {
	e := newEnv(t, "kv")
	e.firer.SetFiresPerPass(10)
	e.create(schedule.Spec{Name: "all", Workflow: "tick", Cron: "* * * * *", Overlap: schedule.OverlapAllow, CatchUp: schedule.CatchUpAll, CatchUpWindow: time.Hour})
	now := minute(34).Add(time.Second) // 35 fires owed, minutes 0-34
	started, calls := 0, 0
	for calls < 10 {
		calls++
		rep, err := e.firer.FireDue(ctxT(t), now)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Fires) > 10 {
			t.Fatalf("call %d decided %d fires, more than its bound of 10", calls, len(rep.Fires))
		}
		started += len(rep.Fires)
		if started < 35 && !rep.Next.Equal(now) {
			t.Fatalf("call %d left %d fires owed and says to call again at %s, not now", calls, 35-started, rep.Next)
		}
		if started == 35 {
			break
		}
	}
	if started != 35 || calls != 4 {
		t.Fatalf("%d fires in %d calls, want 35 in 4", started, calls)
	}
	want := fireIDs("all")
	for m := range 35 {
		want = append(want, schedule.FireID("all", minute(m)))
	}
	slices.Sort(want)
	if got := e.runIDs("tick"); !slices.Equal(got, want) {
		t.Fatalf("runs %v, want one a minute 0-34", got)
	}
}

// A trigger By someone records them on its fire and as who started its
// run, and who cancelled the run it replaces (OverlapCancelPrevious),
// whichever firer carries it out; a fire of the expression, and a trigger
// naming no one, start theirs as "schedule:<name>".
func TestTriggerBy(t *testing.T) {
	e := newEnv(t, "kv")
	ctx := ctxT(t)
	// Fires at 10:01 only: the triggers before have the schedule to themselves.
	e.create(schedule.Spec{Name: "b", Workflow: "hold", Cron: "1 10 * * *", Overlap: schedule.OverlapCancelPrevious})
	first, err := e.firer.Trigger(ctx, "b", minute(0).Add(10*time.Second), schedule.By("ana"))
	if err != nil || first.Result != schedule.Started || first.By != "ana" {
		t.Fatalf("trigger by ana: %+v, %v", first, err)
	}
	if run := e.f.WaitStatus(first.RunID, checkpoint.StatusWaiting, 30*time.Second); run.StartedBy != "ana" {
		t.Errorf("the trigger's run was started by %q, want ana", run.StartedBy)
	}
	if last := e.get("b").State.Last; last == nil || last.By != "ana" {
		t.Errorf("last fire %+v, want by ana", last)
	}

	// Decided by one firer, which dies; carried out by another.
	at := minute(0).Add(20 * time.Second)
	if err := e.firer.DecideTriggerOnly(ctx, "b", at, "bo"); err != nil {
		t.Fatal(err)
	}
	rep, err := e.otherFirer().FireDue(ctx, at.Add(time.Second))
	if err != nil || len(rep.Fires) != 1 || rep.Fires[0].By != "bo" || rep.Fires[0].Cancelled != first.RunID {
		t.Fatalf("carried out by another firer: %+v, %v", rep.Fires, err)
	}
	second := rep.Fires[0].RunID
	if run := e.f.WaitStatus(second, checkpoint.StatusWaiting, 30*time.Second); run.StartedBy != "bo" {
		t.Errorf("the trigger's run was started by %q, want bo", run.StartedBy)
	}
	cancelled := e.f.WaitStatus(first.RunID, checkpoint.StatusCancelled, 30*time.Second)
	if n := len(cancelled.Audit); n == 0 || cancelled.Audit[n-1].Kind != checkpoint.AuditCancelled || cancelled.Audit[n-1].By != "bo" {
		t.Errorf("the replaced run's audit %+v, want cancelled by bo", cancelled.Audit)
	}

	// The expression's fire, then a trigger by no one.
	fires := e.fireDue(minute(1).Add(time.Second))
	if len(fires) != 1 || fires[0].By != "" {
		t.Fatalf("the minute's fire: %+v", fires)
	}
	if run := e.f.WaitStatus(fires[0].RunID, checkpoint.StatusWaiting, 30*time.Second); run.StartedBy != "schedule:b" {
		t.Errorf("the fire's run was started by %q, want schedule:b", run.StartedBy)
	}
	anon, err := e.firer.Trigger(ctx, "b", minute(1).Add(30*time.Second))
	if err != nil || anon.By != "" {
		t.Fatalf("trigger by no one: %+v, %v", anon, err)
	}
	if run := e.f.WaitStatus(anon.RunID, checkpoint.StatusWaiting, 30*time.Second); run.StartedBy != "schedule:b" {
		t.Errorf("the anonymous trigger's run was started by %q, want schedule:b", run.StartedBy)
	}
}
