package schedules

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedule"
)

// plans are the schedules the test creates, each firing every minute.
// "every" starts claims that are paid at once (500 is under the
// approval threshold), so its runs never overlap; the others start
// claims of 5000, which wait for an adjuster the test never sends, so
// each fire after the first finds the previous run waiting.
var plans = []struct {
	name, input, overlap string
}{
	{"every", `{"amount": 500}`, ""}, // the default policy, skip
	{"skip", `{"amount": 5000}`, "skip"},
	{"allow", `{"amount": 5000}`, "allow"},
	{"cancel-previous", `{"amount": 5000}`, "cancel-previous"},
}

// nFires is how many fires the schedules make before they are paused.
const nFires = 5

// TestSchedulesEveryMinute is issue 27's acceptance of schedules at
// process level, on the wall clock, on both stores at once: a worker
// and two scheduler processes of the reference binary; `durable schedule
// create` refuses a bad cron expression and a bad time zone with exit 2
// naming them, then creates the plans; one scheduler (the one that
// carried out the second fire) is SIGKILLed after the second fire and
// started again after the fourth; after the fifth the schedules are
// paused and the test waits past the sixth minute. Then `durable runs
// list` must show, for the five minutes after the schedules were
// created, exactly: "every" five completed runs, each paid once; "skip"
// the first fire's run, waiting (the four later fires skipped); "allow"
// five waiting runs; "cancel-previous" four cancelled and the fifth
// waiting. Each run's id is schedule.FireID of its fire, each fire is
// logged by one scheduler, and each run was started within 5s of its
// fire time.
func TestSchedulesEveryMinute(t *testing.T) {
	if os.Getenv("DURABLE_SCHEDULES") == "" {
		t.Skip("seven minutes of wall clock: run with DURABLE_SCHEDULES=1 go test -timeout 15m -run TestSchedulesEveryMinute ./internal/test/schedules (make schedules)")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each store has its own servers and processes
			d := deploy(t, kind)
			d.refusesBadSpecs()
			minutes := d.createSchedules()
			d.fireAndPause(minutes)
			d.checkRuns(minutes)
			d.checkFires(minutes)
			d.checkProcesses()
		})
	}
}

// refusesBadSpecs: a bad cron expression or time zone exits 2 naming
// it, and nothing is stored.
func (d *deployment) refusesBadSpecs() {
	d.t.Helper()
	for _, bad := range []struct {
		args  []string
		names string
	}{
		{[]string{"--cron", "61 * * * *"}, `cron expression "61 * * * *"`},
		{[]string{"--cron", "* * * *"}, `cron expression "* * * *"`},
		{[]string{"--cron", "* * * * *", "--tz", "Mars/Base"}, `time zone "Mars/Base"`},
	} {
		r := d.cli(append([]string{"schedule", "create", "bad", "--workflow", "claim"}, bad.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, bad.names) {
			d.t.Errorf("want exit 2 naming %s: %s", bad.names, r)
		}
	}
	var listed []schedule.Schedule
	d.cliJSON(&listed, "schedule", "list", "--json")
	if len(listed) != 0 {
		d.t.Errorf("refused schedules were stored: %+v", listed)
	}
}

// createSchedules creates the plans with `durable schedule create` and
// returns the nFires minutes after their creation: the fire times. They
// are created in one minute, away from its end.
func (d *deployment) createSchedules() []time.Time {
	d.t.Helper()
	if next := time.Now().Truncate(time.Minute).Add(time.Minute); time.Until(next) < 10*time.Second {
		time.Sleep(time.Until(next) + time.Second) // the wall clock is what the test is about
	}
	var first time.Time
	for _, p := range plans {
		args := []string{"schedule", "create", p.name, "--workflow", "claim", "--cron", "* * * * *", "--input", p.input, "--by", "schedules-test", "--json"}
		if p.overlap != "" {
			args = append(args, "--overlap", p.overlap)
		}
		var sc schedule.Schedule
		d.cliJSON(&sc, args...)
		// Its first fire: the first minute after it became active.
		m := sc.ActiveSince.UTC().Truncate(time.Minute).Add(time.Minute)
		if !first.IsZero() && !m.Equal(first) {
			d.t.Fatalf("schedule %s created in another minute than %s (active since %s)", p.name, plans[0].name, sc.ActiveSince)
		}
		first = m
	}
	minutes := make([]time.Time, nFires)
	for i := range minutes {
		minutes[i] = first.Add(time.Duration(i) * time.Minute)
	}
	d.t.Logf("%s: schedules created at %s; fires at %s ... %s", d.kind, time.Now().UTC().Format(time.TimeOnly), minutes[0].Format(time.TimeOnly), minutes[nFires-1].Format(time.TimeOnly))
	return minutes
}

// fireAndPause waits for each fire of every schedule, SIGKILLs the
// scheduler that carried out "every"'s second fire after it and starts
// it again after the fourth, pauses the schedules after the fifth, waits
// for "every"'s last run to complete, and then past the sixth minute.
func (d *deployment) fireAndPause(minutes []time.Time) {
	d.t.Helper()
	var killed int
	for k, m := range minutes {
		d.waitHandled(m)
		switch k {
		case 1:
			killed = d.killFirer(m)
		case 3:
			s := d.schedulers[killed]
			if err := s.Restart(60 * time.Second); err != nil {
				d.t.Fatal(err)
			}
			d.t.Logf("%s: %s started again at %s", d.kind, s.Name(), time.Now().UTC().Format(time.TimeOnly))
		}
	}
	sixth := minutes[nFires-1].Add(time.Minute)
	for _, p := range plans {
		var sc schedule.Schedule
		d.cliJSON(&sc, "schedule", "pause", p.name, "--by", "schedules-test", "--json")
		if !sc.Spec.Paused {
			d.t.Errorf("schedule %s not paused: %+v", p.name, sc)
		}
	}
	if now := time.Now(); !now.Before(sixth) {
		d.t.Fatalf("paused at %s, after the sixth fire time %s: the test was too slow", now.UTC().Format(time.TimeOnly), sixth.Format(time.TimeOnly))
	}
	d.waitStatus(schedule.FireID("every", minutes[nFires-1]), checkpoint.StatusCompleted, 30*time.Second)
	// A paused schedule owes nothing: nothing may start at the sixth minute.
	time.Sleep(time.Until(sixth.Add(5 * time.Second)))
}

// checkProcesses: no process ended on its own, and none logged a
// warning or an error (a fire that failed, a pass over the schedules
// that failed, a step that failed).
func (d *deployment) checkProcesses() {
	d.t.Helper()
	for _, s := range d.services() {
		for _, e := range s.Exits() {
			d.t.Errorf("a process ended on its own: %s", e)
		}
		for _, path := range s.Logs() {
			b, err := os.ReadFile(path)
			if err != nil {
				d.t.Fatal(err)
			}
			for line := range strings.Lines(string(b)) {
				if strings.Contains(line, `"level":"warn"`) || strings.Contains(line, `"level":"error"`) {
					d.t.Errorf("%s: %s", filepath.Base(path), strings.TrimSpace(line))
				}
			}
		}
	}
}

// waitHandled waits until every plan's fire at m is carried out (started
// or skipped).
func (d *deployment) waitHandled(m time.Time) {
	d.t.Helper()
	waitFor(d.t, time.Until(m)+30*time.Second, fmt.Sprintf("the fires at %s", m.Format(time.TimeOnly)), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		all, err := d.schedules.List(ctx)
		if err != nil || len(all) != len(plans) {
			return false
		}
		for _, sc := range all {
			if sc.State.Last == nil || sc.State.Last.At.Before(m) {
				return false
			}
		}
		return true
	})
}

// killFirer SIGKILLs the scheduler that logged "every"'s fire at m and
// returns its index.
func (d *deployment) killFirer(m time.Time) int {
	d.t.Helper()
	by := ""
	waitFor(d.t, 10*time.Second, "the log of every's fire at "+m.Format(time.TimeOnly), func() bool {
		for _, f := range d.fires() {
			if f.Schedule == "every" && f.At.Equal(m) {
				by = f.By
			}
		}
		return by != ""
	})
	for i, s := range d.schedulers {
		if strings.HasPrefix(by, s.Name()+".") {
			if err := s.Kill(); err != nil {
				d.t.Fatal(err)
			}
			d.t.Logf("%s: %s (which fired every at %s) SIGKILLed at %s", d.kind, s.Name(), m.Format(time.TimeOnly), time.Now().UTC().Format(time.TimeOnly))
			return i
		}
	}
	d.t.Fatalf("no scheduler named by %q", by)
	return 0
}

func (d *deployment) waitStatus(id string, want checkpoint.Status, timeout time.Duration) {
	d.t.Helper()
	waitFor(d.t, timeout, fmt.Sprintf("%s %s", id, want), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		run, err := d.store.GetRun(ctx, id)
		return err == nil && run.Status == want
	})
}

// wantRuns are the runs each plan's fires at minutes start, with the
// status they end the test in.
func wantRuns(minutes []time.Time) map[string]map[string]checkpoint.Status {
	want := map[string]map[string]checkpoint.Status{}
	for _, p := range plans {
		want[p.name] = map[string]checkpoint.Status{}
		for i, m := range minutes {
			id := schedule.FireID(p.name, m)
			switch p.name {
			case "every":
				want[p.name][id] = checkpoint.StatusCompleted
			case "skip":
				if i == 0 {
					want[p.name][id] = checkpoint.StatusWaiting
				}
			case "allow":
				want[p.name][id] = checkpoint.StatusWaiting
			case "cancel-previous":
				want[p.name][id] = checkpoint.StatusCancelled
				if i == len(minutes)-1 {
					want[p.name][id] = checkpoint.StatusWaiting
				}
			}
		}
	}
	return want
}

// checkRuns lists the claims with `durable runs list` and compares them
// with wantRuns; each of "every"'s runs made one payment, and no other
// run paid; each run started within 5s of its fire time.
func (d *deployment) checkRuns(minutes []time.Time) {
	d.t.Helper()
	var runs []client.RunSummary
	d.cliJSON(&runs, "runs", "list", "--workflow", "claim", "--limit", "0", "--json")
	got := map[string]map[string]checkpoint.Status{}
	var late time.Duration
	for _, r := range runs {
		name, at := planOf(r.RunID, minutes)
		if name == "" {
			d.t.Errorf("a run of claim that is no fire of a schedule: %s (%s, created %s)", r.RunID, r.Status, r.CreatedAt.UTC().Format(time.StampMilli))
			continue
		}
		if got[name] == nil {
			got[name] = map[string]checkpoint.Status{}
		}
		got[name][r.RunID] = r.Status
		late = max(late, r.CreatedAt.Sub(at))
		if r.CreatedAt.Sub(at) > 5*time.Second || r.CreatedAt.Before(at) {
			d.t.Errorf("run %s created at %s, its fire time %s", r.RunID, r.CreatedAt.UTC().Format(time.StampMilli), at.Format(time.TimeOnly))
		}
	}
	for name, want := range wantRuns(minutes) {
		if !maps.Equal(got[name], want) {
			d.t.Errorf("schedule %s: runs %v, want %v", name, got[name], want)
		}
		d.t.Logf("%s: schedule %s: %s", d.kind, name, describe(got[name]))
	}
	d.t.Logf("%s: %d runs, the latest started %s after its fire time", d.kind, len(runs), late.Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	paid, err := d.pay.List(ctx)
	if err != nil {
		d.t.Fatal(err)
	}
	byRun := map[string][]payments.Payment{}
	for _, p := range paid {
		byRun[p.RunID] = append(byRun[p.RunID], p)
	}
	for _, m := range minutes {
		id := schedule.FireID("every", m)
		if ps := byRun[id]; len(ps) != 1 || ps[0].Amount != 500 {
			d.t.Errorf("run %s: payments %+v, want one of 500", id, ps)
		}
	}
	if len(paid) != nFires {
		d.t.Errorf("%d payments, want %d (one a run of every; the others wait for approval)", len(paid), nFires)
	}
}

// planOf is the plan and fire time of a run id, "" when it is not one
// of minutes' fires.
func planOf(id string, minutes []time.Time) (string, time.Time) {
	for _, p := range plans {
		for _, m := range minutes {
			if id == schedule.FireID(p.name, m) {
				return p.name, m
			}
		}
	}
	return "", time.Time{}
}

func describe(runs map[string]checkpoint.Status) string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(runs)) {
		out = append(out, id+" "+string(runs[id]))
	}
	return strings.Join(out, ", ")
}
