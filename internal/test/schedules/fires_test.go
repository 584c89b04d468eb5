package schedules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/schedule"
)

// checkFires: the schedulers logged each fire of each plan once (one
// scheduler carries a fire out, however many saw it due), with the
// result its overlap policy gives; `durable schedule list` shows the
// schedules paused with the fifth fire their last.
func (d *deployment) checkFires(minutes []time.Time) {
	d.t.Helper()
	logged := map[string][]fired{}
	for _, f := range d.fires() {
		logged[f.Schedule] = append(logged[f.Schedule], f)
	}
	for _, p := range plans {
		fs := logged[p.name]
		slices.SortFunc(fs, func(a, b fired) int { return a.At.Compare(b.At) })
		if len(fs) != nFires {
			d.t.Errorf("schedule %s: %d fires logged, want %d: %+v", p.name, len(fs), nFires, fs)
		}
		var table []string
		for i, f := range fs[:min(len(fs), nFires)] {
			m := minutes[i]
			result, cancelled := schedule.Started, ""
			switch {
			case p.name == "skip" && i > 0:
				result = schedule.Skipped
			case p.name == "cancel-previous" && i > 0:
				cancelled = schedule.FireID(p.name, minutes[i-1])
			}
			if !f.At.Equal(m) || f.RunID != schedule.FireID(p.name, m) || f.Result != string(result) || f.Cancelled != cancelled {
				d.t.Errorf("schedule %s: fire %d logged as %+v, want at %s run %s %s cancelling %q", p.name, i+1, f, m.Format(time.TimeOnly), schedule.FireID(p.name, m), result, cancelled)
			}
			if result == schedule.Skipped && !strings.Contains(f.Reason, schedule.FireID(p.name, minutes[0])) {
				d.t.Errorf("schedule %s: fire %d skipped for %q, want the first fire's run named", p.name, i+1, f.Reason)
			}
			table = append(table, fmt.Sprintf("%s %s by %s", f.At.Format("15:04"), f.Result, f.By))
		}
		d.t.Logf("%s: schedule %s fires: %s", d.kind, p.name, strings.Join(table, "; "))
	}

	var listed []schedule.Schedule
	d.cliJSON(&listed, "schedule", "list", "--json")
	last := minutes[nFires-1]
	for _, sc := range listed {
		if !sc.Spec.Paused || !sc.State.LastFire.Equal(last) || sc.State.Last == nil || !sc.State.Last.At.Equal(last) {
			d.t.Errorf("schedule %s listed as %+v, want paused with its last fire at %s", sc.Spec.Name, sc, last.Format(time.TimeOnly))
		}
	}
	if len(listed) != len(plans) {
		d.t.Errorf("%d schedules listed, want %d", len(listed), len(plans))
	}
}
