package schedule_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/schedule"
)

func ExampleFireID() {
	fmt.Println(schedule.FireID("nightly", time.Date(2026, 12, 4, 2, 0, 0, 0, time.UTC)))
	// Output: nightly-20261204T0200Z
}

func ExampleSpec_Due() {
	spec := schedule.Spec{Name: "hourly", Workflow: "reconcile", Cron: "0 * * * *", CatchUp: schedule.CatchUpAll}
	last := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	// The schedulers were down from 10:05 to 13:30.
	due, _ := spec.Due(last, time.Date(2026, 12, 4, 13, 30, 0, 0, time.UTC))
	for _, t := range due {
		fmt.Println(schedule.FireID(spec.Name, t))
	}
	// Output:
	// hourly-20261204T1100Z
	// hourly-20261204T1200Z
	// hourly-20261204T1300Z
}

func ExampleSpec_Validate() {
	err := schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *", TimeZone: "Mars/Base"}.Validate()
	fmt.Println(err, errors.Is(err, schedule.ErrBadSpec))
	// Output: time zone "Mars/Base": unknown (use an IANA name such as Europe/Berlin, or UTC) true
}

func ExampleSpec_Next() {
	// 02:30 does not exist in Berlin on 29 March 2026: it fires at 03:30 CEST.
	spec := schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "30 2 * * *", TimeZone: "Europe/Berlin"}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	next, _ := spec.Next(time.Date(2026, 3, 28, 12, 0, 0, 0, berlin))
	fmt.Println(next.In(berlin).Format("2006-01-02 15:04 MST"))
	// Output: 2026-03-29 03:30 CEST
}
