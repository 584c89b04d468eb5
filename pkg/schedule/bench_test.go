package schedule_test

import (
	"fmt"
	"testing"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/schedule"
)

// A full store (10,000 schedules, the default bound), none due: what a
// scheduler's FireDue costs each time it looks, and what a create costs
// (it counts the schedules first).
func BenchmarkFull(b *testing.B) {
	const n = 10_000
	f := testfleet.New(b, "kv")
	c := newClock("2026-12-04T09:59:30Z")
	st, err := schedule.NewStore(b.Context(), f.JS, schedule.StoreOptions{MaxSchedules: n + 1000})
	if err != nil {
		b.Fatal(err)
	}
	st.SetClock(c.Now)
	specs := make([]schedule.Spec, n)
	for i := range specs {
		specs[i] = schedule.Spec{Name: fmt.Sprintf("s%05d", i), Workflow: "tick", Cron: "0 2 * * *", TimeZone: "Europe/Berlin",
			Input: []byte(`{"tenant": "acme", "mode": "full"}`)}
	}
	if err := st.Fill(b.Context(), specs); err != nil {
		b.Fatal(err)
	}
	firer := schedule.NewFirer(st, f.Client)
	b.Run("FireDue", func(b *testing.B) {
		for b.Loop() {
			rep, err := firer.FireDue(b.Context(), minute(1))
			if err != nil || len(rep.Fires) != 0 {
				b.Fatal(rep, err)
			}
		}
	})
	b.Run("Create", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := st.Create(b.Context(), schedule.Spec{Name: fmt.Sprintf("new%d", i), Workflow: "tick", Cron: "@daily"}, "b"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
