package schedule_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/schedule"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// fires lists the first n fire times of spec after from.
func fires(t *testing.T, spec schedule.Spec, from time.Time, n int) []time.Time {
	t.Helper()
	var out []time.Time
	for range n {
		next, err := spec.Next(from)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, next)
		from = next
	}
	return out
}

func times(ss ...string) []time.Time {
	var out []time.Time
	for _, s := range ss {
		out = append(out, utc(s))
	}
	return out
}

// Fire times around daylight saving time: each wall-clock time the
// expression matches fires once (RFC 5545's reading of local times). In
// Europe/Berlin 2026 the clock jumps from 02:00 CET to 03:00 CEST on 29
// March (01:00Z) and falls back from 03:00 CEST to 02:00 CET on 25
// October (01:00Z). robfig/cron's own Next would skip 02:30 on 29 March
// and fire twice on 25 October.
func TestNextDST(t *testing.T) {
	tests := []struct {
		name      string
		cron, tz  string
		from      string
		want      []string
		wantLocal []string // the same, read in tz, when given
	}{
		{
			name: "daily 02:30 on the spring-forward day fires at 03:30 CEST",
			cron: "30 2 * * *", tz: "Europe/Berlin", from: "2026-03-28T12:00:00Z",
			want:      []string{"2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"},
			wantLocal: []string{"2026-03-29 03:30 CEST", "2026-03-30 02:30 CEST"},
		},
		{
			name: "daily 02:30 on the fall-back day fires once, at the first 02:30",
			cron: "30 2 * * *", tz: "Europe/Berlin", from: "2026-10-24T12:00:00Z",
			want:      []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
			wantLocal: []string{"2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"},
		},
		{
			name: "daily 01:30, outside the changes, keeps its wall-clock time",
			cron: "30 1 * * *", tz: "Europe/Berlin", from: "2026-03-28T12:00:00Z",
			want: []string{"2026-03-29T00:30:00Z", "2026-03-29T23:30:00Z"},
		},
		{
			name: "half-hourly over the jump: the skipped times coincide with real ones, no duplicate",
			cron: "*/30 * * * *", tz: "Europe/Berlin", from: "2026-03-28T23:45:00Z",
			want: []string{"2026-03-29T00:00:00Z", "2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:00:00Z"},
		},
		{
			name: "half-hourly over the fall back: nothing in the repeated hour",
			cron: "*/30 * * * *", tz: "Europe/Berlin", from: "2026-10-24T23:45:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z"},
		},
		{
			name: "New York 02:00 on its spring-forward day fires at 03:00 EDT",
			cron: "0 2 * * *", tz: "America/New_York", from: "2026-03-07T12:00:00Z",
			want: []string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"},
		},
		{
			name: "created just after the jump, the skipped 02:30 is still ahead",
			cron: "30 2 * * *", tz: "Europe/Berlin", from: "2026-03-29T01:10:00Z",
			want: []string{"2026-03-29T01:30:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			name: "UTC by default",
			cron: "0 2 * * *", from: "2026-03-28T12:00:00Z",
			want: []string{"2026-03-29T02:00:00Z", "2026-03-30T02:00:00Z"},
		},
		{
			name: "a 30-minute shift (Lord Howe, 5 April 2026, 02:00 back to 01:30)",
			cron: "45 1 * * *", tz: "Australia/Lord_Howe", from: "2026-04-04T00:00:00Z",
			want: []string{"2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := schedule.Spec{Name: "s", Workflow: "w", Cron: tt.cron, TimeZone: tt.tz}
			got := fires(t, spec, utc(tt.from), len(tt.want))
			if !slices.Equal(got, times(tt.want...)) {
				t.Errorf("fires %v\nwant  %v", got, tt.want)
			}
			if tt.wantLocal == nil {
				return
			}
			loc, _ := time.LoadLocation(tt.tz)
			for i, g := range got {
				if l := g.In(loc).Format("2006-01-02 15:04 MST"); l != tt.wantLocal[i] {
					t.Errorf("fire %d at %s local, want %s", i, l, tt.wantLocal[i])
				}
			}
		})
	}
}

func TestDue(t *testing.T) {
	hourly := schedule.Spec{Name: "s", Workflow: "w", Cron: "0 * * * *"}
	withWindow := func(s schedule.Spec, c schedule.CatchUp, w time.Duration) schedule.Spec {
		s.CatchUp, s.CatchUpWindow = c, w
		return s
	}
	minutely := schedule.Spec{Name: "s", Workflow: "w", Cron: "* * * * *"}
	daily := schedule.Spec{Name: "s", Workflow: "w", Cron: "0 2 * * *"}
	var hours60 []time.Time
	for m := range 60 {
		hours60 = append(hours60, utc("2026-12-04T12:01:00Z").Add(time.Duration(m)*time.Minute))
	}
	tests := []struct {
		name      string
		spec      schedule.Spec
		last, now string
		want      []time.Time
	}{
		{"created after the last fire: nothing yet", hourly, "2026-12-04T10:00:30Z", "2026-12-04T10:59:59Z", nil},
		{"on time", hourly, "2026-12-04T10:00:30Z", "2026-12-04T11:00:02Z", times("2026-12-04T11:00:00Z")},
		{"exactly at the fire time", hourly, "2026-12-04T10:00:00Z", "2026-12-04T11:00:00Z", times("2026-12-04T11:00:00Z")},
		{"fired already", hourly, "2026-12-04T11:00:00Z", "2026-12-04T11:30:00Z", nil},
		{"outage, last (default): the newest missed fire", hourly, "2026-12-04T10:00:00Z", "2026-12-04T13:30:00Z", times("2026-12-04T13:00:00Z")},
		{"outage, all: every missed fire, oldest first", withWindow(hourly, schedule.CatchUpAll, 24*time.Hour), "2026-12-04T10:00:00Z", "2026-12-04T13:30:00Z",
			times("2026-12-04T11:00:00Z", "2026-12-04T12:00:00Z", "2026-12-04T13:00:00Z")},
		{"outage, all, window 1h: only the fire in the last hour", withWindow(hourly, schedule.CatchUpAll, time.Hour), "2026-12-04T10:00:00Z", "2026-12-04T13:30:00Z",
			times("2026-12-04T13:00:00Z")},
		{"outage, last, window 20m: the newest fire is too old", withWindow(hourly, schedule.CatchUpLast, 20*time.Minute), "2026-12-04T10:00:00Z", "2026-12-04T13:30:00Z", nil},
		{"outage, window 1m: a fire a minute old is dropped", withWindow(hourly, schedule.CatchUpLast, time.Minute), "2026-12-04T10:00:00Z", "2026-12-04T13:01:00Z", nil},
		{"daily job, outage over its time, default window", daily, "2026-12-03T02:00:00Z", "2026-12-04T08:00:00Z", times("2026-12-04T02:00:00Z")},
		{"daily job, outage of two days, last", daily, "2026-12-02T02:00:00Z", "2026-12-04T08:00:00Z", times("2026-12-04T02:00:00Z")},
		{"daily job, outage over its time, window 1h", withWindow(daily, schedule.CatchUpLast, time.Hour), "2026-12-03T02:00:00Z", "2026-12-04T08:00:00Z", nil},
		{"every minute, all, 3h outage, window 1h: the last 60", withWindow(minutely, schedule.CatchUpAll, time.Hour), "2026-12-04T10:00:00Z", "2026-12-04T13:00:30Z", hours60},
		{"a month of outage, last: one fire", minutely, "2026-11-04T10:00:00Z", "2026-12-04T13:00:30Z", times("2026-12-04T13:00:00Z")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.spec.Due(utc(tt.last), utc(tt.now))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("due %v\nwant %v", got, tt.want)
			}
		})
	}
}

// A paused schedule owes nothing; one made or resumed owes nothing
// before ActiveSince; NextFire says what is owed, or what comes.
func TestScheduleDue(t *testing.T) {
	sch := schedule.Schedule{
		Spec:        schedule.Spec{Name: "s", Workflow: "w", Cron: "0 * * * *", TimeZone: "UTC", Overlap: schedule.OverlapSkip, CatchUp: schedule.CatchUpAll, CatchUpWindow: 24 * time.Hour},
		ActiveSince: utc("2026-12-04T10:30:00Z"),
	}
	now := utc("2026-12-04T12:10:00Z")
	if got := sch.Due(now); !slices.Equal(got, times("2026-12-04T11:00:00Z", "2026-12-04T12:00:00Z")) {
		t.Errorf("due since created: %v", got)
	}
	if got := sch.NextFire(now); !got.Equal(utc("2026-12-04T11:00:00Z")) {
		t.Errorf("next fire, overdue: %v", got)
	}
	sch.State.LastFire = utc("2026-12-04T12:00:00Z")
	if got := sch.Due(now); got != nil {
		t.Errorf("due after the last fire: %v", got)
	}
	if got := sch.NextFire(now); !got.Equal(utc("2026-12-04T13:00:00Z")) {
		t.Errorf("next fire: %v", got)
	}
	sch.Spec.Paused = true
	if got := sch.Due(now.Add(5 * time.Hour)); got != nil {
		t.Errorf("due while paused: %v", got)
	}
	if got := sch.NextFire(now); !got.IsZero() {
		t.Errorf("next fire while paused: %v", got)
	}
}

func TestFireID(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	tests := []struct {
		name string
		at   time.Time
		want string
	}{
		{"nightly", utc("2026-12-04T02:00:00Z"), "nightly-20261204T0200Z"},
		{"nightly", time.Date(2026, 12, 4, 3, 0, 0, 0, berlin), "nightly-20261204T0200Z"},              // the same instant
		{"nightly", utc("2026-12-04T02:00:00Z").Add(400 * time.Millisecond), "nightly-20261204T0200Z"}, // the same second
		{"nightly", utc("2026-12-04T02:00:13Z"), "nightly-20261204T020013Z"},                           // a trigger
		{"a_b-c", utc("2026-01-02T03:04:00Z"), "a_b-c-20260102T0304Z"},
	}
	for _, tt := range tests {
		if got := schedule.FireID(tt.name, tt.at); got != tt.want {
			t.Errorf("FireID(%s, %s) = %s, want %s", tt.name, tt.at, got, tt.want)
		}
	}
	long := strings.Repeat("n", schedule.MaxNameLen)
	if id := schedule.FireID(long, utc("2026-12-04T02:00:13Z")); len(id) > 128 {
		t.Errorf("the longest fire id has %d characters", len(id))
	}
}
