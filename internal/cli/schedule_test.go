package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
	"github.com/durable-run/durable/pkg/scheduler"
)

// `durable schedule`: bad expressions and zones exit 2 naming them; a
// schedule is created, listed, triggered, fired by two schedulers at
// once (one run per fire, its id from the fire time), paused, resumed
// and deleted.
func TestScheduleCommands(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		for _, bad := range []struct {
			args  []string
			names string
		}{
			{[]string{"--cron", "61 * * * *"}, `cron expression "61 * * * *"`},
			{[]string{"--cron", "0 2 * * *", "--tz", "Mars/Base"}, `time zone "Mars/Base"`},
			{[]string{"--cron", "0 2 * * *", "--overlap", "sometimes"}, "sometimes"},
			{[]string{"--cron", "0 2 * * *", "--input", "[1]"}, "input"},
		} {
			args := append([]string{"schedule", "create", "bad", "--workflow", "claim"}, bad.args...)
			if r := e.cli(args...); r.code != 2 || !strings.Contains(r.stderr, bad.names) {
				t.Errorf("durable %s: want exit 2 naming %s, got %s", strings.Join(args, " "), bad.names, r)
			}
		}
		if r := e.cli("schedule", "trigger", "no-such-schedule"); r.code != 3 || !strings.Contains(r.stderr, "no-such-schedule") {
			t.Errorf("trigger of an unknown schedule: want exit 3 naming it, got %s", r)
		}

		// A workflow no worker runs yet: kept, with a warning.
		if r := e.mustCLI(0, "schedule", "create", "later", "--workflow", "reconcile", "--cron", "0 2 * * *"); !strings.Contains(r.stderr, `no worker has registered workflow "reconcile"`) {
			t.Errorf("schedule create of an unregistered workflow: want a warning, got %s", r)
		}
		e.mustCLI(0, "schedule", "delete", "later")

		r := e.mustCLI(0, "schedule", "create", "every", "--workflow", "claim", "--cron", "* * * * *", "--input", `{"amount": 500}`, "--by", "ana", "--json")
		var created schedule.Schedule
		if err := json.Unmarshal([]byte(r.stdout), &created); err != nil || created.Spec.Name != "every" || created.Spec.Overlap != schedule.OverlapSkip {
			t.Fatalf("schedule create --json: %v\n%s", err, r.stdout)
		}
		if r := e.cli("schedule", "create", "every", "--workflow", "claim", "--cron", "* * * * *"); r.code != 2 {
			t.Errorf("a second create of the same name: want exit 2, got %s", r)
		}
		var listed []schedule.Schedule
		if err := json.Unmarshal([]byte(e.mustCLI(0, "schedule", "list", "--json").stdout), &listed); err != nil || len(listed) != 1 || listed[0].Spec.Cron != "* * * * *" {
			t.Fatalf("schedule list --json: %v %+v", err, listed)
		}

		// Who triggers is recorded: on the fire, and as who started its run.
		fire := triggerJSON(t, e.mustCLI(0, "schedule", "trigger", "every", "--by", "bo", "--json"))
		if fire.Result != schedule.Started || !strings.HasPrefix(fire.RunID, "every-") || fire.By != "bo" {
			t.Fatalf("schedule trigger --by bo --json: %+v", fire)
		}
		if run := e.waitStatus(fire.RunID, checkpoint.StatusCompleted); run.StartedBy != "bo" {
			t.Errorf("the trigger's run was started by %q, want bo", run.StartedBy)
		}
		// The list shows the next fire and the last one with its run and
		// who triggered it (the shape of the approver's GET /api/schedules
		// too).
		var views []schedule.View
		if err := json.Unmarshal([]byte(e.mustCLI(0, "schedule", "list", "--json").stdout), &views); err != nil || len(views) != 1 ||
			views[0].NextFire.IsZero() || views[0].State.Last == nil || views[0].State.Last.RunID != fire.RunID || views[0].State.Last.By != "bo" {
			t.Fatalf("schedule list --json after the trigger: %v %+v", err, views)
		}
		if out := e.mustCLI(0, "schedule", "list").stdout; !strings.Contains(out, "NEXT FIRE") || !strings.Contains(out, fire.RunID+" by bo") {
			t.Errorf("schedule list: want the next fire and the trigger's run by bo, got\n%s", out)
		}

		// Two schedulers on one clock, moved a minute at a time.
		var offset atomic.Int64
		clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		e.runSchedulers(2, clock)
		minute := created.ActiveSince.Truncate(time.Minute).Add(time.Minute)
		for k := range 2 {
			at := minute.Add(time.Duration(k) * time.Minute)
			offset.Store(int64(time.Until(at) + time.Second))
			e.waitStatus(schedule.FireID("every", at), checkpoint.StatusCompleted)
		}
		e.mustCLI(0, "schedule", "pause", "every", "--by", "ana")
		offset.Store(int64(time.Until(minute.Add(3*time.Minute)) + time.Second))
		time.Sleep(time.Second) // ten passes of each scheduler
		fired := 0
		for _, run := range e.listJSON("--workflow", "claim") {
			if id, _ := run["run_id"].(string); strings.HasPrefix(id, "every-") {
				fired++
			}
		}
		if fired != 3 { // the trigger's and two fires'
			t.Fatalf("%d runs of the schedule, want 3: the trigger and one a fire, none while paused", fired)
		}
		e.mustCLI(0, "schedule", "resume", "every")
		e.mustCLI(0, "schedule", "delete", "every")
		if r := e.cli("schedule", "pause", "every"); r.code != 3 {
			t.Errorf("pause of a deleted schedule: want exit 3, got %s", r)
		}
	})
}

// runSchedulers runs n schedulers on the env's store, on clock, until the
// test ends: they fire the schedules a pass every 100 ms.
func (e *env) runSchedulers(n int, clock func() time.Time) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	for range n {
		st, err := schedule.NewStore(ctx, e.js, schedule.StoreOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		sch, err := scheduler.New(scheduler.Config{Client: client.New(e.js, e.store), Schedules: st, ScheduleInterval: 100 * time.Millisecond, Now: clock})
		if err != nil {
			e.t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = sch.Run(ctx) }()
	}
}

// A trigger that starts no run exits 1, with --json as without (the JSON
// of its fire still printed): skipped by the overlap policy while the
// previous run waits, or failed because a different run holds its id
// (issue 27: --json exited 0 for both, and the text mode 0 for a skip).
func TestScheduleTriggerRefused(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		// claim's default amount parks it for approval: its run stays
		// waiting, so the next trigger is skipped.
		e.mustCLI(0, "schedule", "create", "held", "--workflow", "claim", "--cron", "0 2 * * *")
		first := triggerJSON(t, e.mustCLI(0, "schedule", "trigger", "held", "--json"))
		if first.Result != schedule.Started {
			t.Fatalf("first trigger: %+v", first)
		}
		e.waitStatus(first.RunID, checkpoint.StatusWaiting)
		var r result
		var skipped schedule.Fire
		testenv.Eventually(t, 5*time.Second, "a trigger in another second", func() bool {
			r = e.cli("schedule", "trigger", "held", "--json")
			skipped = triggerJSON(t, r)
			return skipped.RunID != first.RunID
		})
		if r.code != 1 || skipped.Result != schedule.Skipped || !strings.Contains(r.stderr, "skipped") || !strings.Contains(r.stderr, first.RunID) {
			t.Errorf("trigger --json while %s waits: want exit 1, the skipped fire, and why on stderr; got %s", first.RunID, r)
		}
		if r := e.cli("schedule", "trigger", "held"); r.code != 1 || !strings.Contains(r.stdout, "skipped") {
			t.Errorf("trigger while %s waits: want exit 1, skipped; got %s", first.RunID, r)
		}

		// Runs of another input hold the ids of the triggers of the next
		// seconds: the trigger's run is refused, its fire failed.
		e.mustCLI(0, "schedule", "create", "taken", "--workflow", "claim", "--cron", "0 2 * * *", "--overlap", "allow")
		now := time.Now().UTC().Truncate(time.Second)
		for s := range 10 {
			e.mustCLI(0, "start", "claim", "--id", "taken-"+now.Add(time.Duration(s)*time.Second).Format("20060102T150405Z"), "--input", `{"amount": 1}`)
		}
		r = e.cli("schedule", "trigger", "taken", "--json")
		if failed := triggerJSON(t, r); r.code != 1 || failed.Result != schedule.Failed || !strings.Contains(failed.Reason, "run id taken") {
			t.Errorf("trigger --json of a taken id: want exit 1 and the failed fire, got %s", r)
		}
		if r := e.cli("schedule", "trigger", "taken"); r.code != 1 || !strings.Contains(r.stderr, "run id taken") {
			t.Errorf("trigger of a taken id: want exit 1 naming why, got %s", r)
		}
	})
}

// triggerJSON decodes the fire `schedule trigger --json` printed.
func triggerJSON(t *testing.T, r result) schedule.Fire {
	t.Helper()
	var fire schedule.Fire
	if err := json.Unmarshal([]byte(r.stdout), &fire); err != nil {
		t.Fatalf("schedule trigger --json: %v\n%s", err, r)
	}
	return fire
}

// A full store (10,000 schedules, the CLI's bound) refuses one more with
// exit 2 naming the bound, as `limit set` does past its own; deleting one
// makes room.
func TestScheduleCreateFullStore(t *testing.T) {
	e := newEnv(t, "kv")
	ctx := t.Context()
	if _, err := schedule.NewStore(ctx, e.js, schedule.StoreOptions{}); err != nil { // the bucket
		t.Fatal(err)
	}
	// Stored as Store.Create stores them, without its count before each.
	for i := range 10_000 {
		name := fmt.Sprintf("s%05d", i)
		data, err := json.Marshal(schedule.Schedule{Spec: schedule.Spec{Name: name, Workflow: "claim", Cron: "0 2 * * *"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.js.PublishAsync("$KV.durable_schedules.s."+name, data); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("filling the store timed out")
	}
	r := e.cli("schedule", "create", "one-more", "--workflow", "claim", "--cron", "0 2 * * *")
	if r.code != 2 || !strings.Contains(r.stderr, "at most 10000") || !strings.Contains(r.stderr, "one-more") {
		t.Fatalf("create in a full store: want exit 2 naming the bound, got %s", r)
	}
	e.mustCLI(0, "schedule", "delete", "s00000")
	e.mustCLI(0, "schedule", "create", "one-more", "--workflow", "claim", "--cron", "0 2 * * *")
}
