package schedule

import "time"

// FireID is the id of the run that schedule name starts for its fire at
// t: "<name>-<t in UTC>", e.g. "nightly-20261204T0200Z", with the seconds
// ("nightly-20261204T020013Z") when t is not on a minute; fractions of a
// second are dropped. A trigger's run always has the seconds
// ("nightly-20261204T020000Z"), so that it is never a fire's. A pure function of the schedule and
// the time: whichever firer handles a fire, and however often, it starts
// the same run id, and client.Start is idempotent by run id, so a fire
// starts one run.
func FireID(name string, t time.Time) string {
	t = t.UTC().Truncate(time.Second)
	layout := "20060102T1504Z"
	if t.Second() != 0 {
		layout = "20060102T150405Z"
	}
	return name + "-" + t.Format(layout)
}

// triggerID is the id of the run a trigger of schedule name at t starts:
// FireID's, always with the seconds.
func triggerID(name string, t time.Time) string {
	return name + "-" + t.UTC().Truncate(time.Second).Format("20060102T150405Z")
}
