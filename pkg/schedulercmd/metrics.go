package schedulercmd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/scheduler"
)

// RegisterMetrics exports on m the counters of the scheduler stats returns
// (read on scrape): expired waits by the action taken, repairs and errors.
// Register once per process; stats may follow a scheduler that is
// replaced after a reconnect. It lives here, not in pkg/metrics, so that a
// worker binary does not link the scheduler.
func RegisterMetrics(m *metrics.Metrics, stats func() scheduler.Stats) {
	reg := m.Registry()
	stat := func(f func(scheduler.Stats) int64) func() float64 {
		return func() float64 { return float64(f(stats())) }
	}
	counters := func(name, help, label string, by map[string]func(scheduler.Stats) int64) {
		for value, f := range by {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: name, Help: help, ConstLabels: prometheus.Labels{label: value},
			}, stat(f)))
		}
	}
	counters("durable_scheduler_expired_waits_total",
		"Waits past their deadline the scheduler handled, by action: rejected (policy reject, or escalation and reminders used up), escalated, reminded, woke (a durable timer).",
		"action", map[string]func(scheduler.Stats) int64{
			"rejected":  func(st scheduler.Stats) int64 { return st.Rejected },
			"escalated": func(st scheduler.Stats) int64 { return st.Escalated },
			"reminded":  func(st scheduler.Stats) int64 { return st.Reminded },
			"woke":      func(st scheduler.Stats) int64 { return st.Woke },
		})
	counters("durable_scheduler_repairs_total",
		"Repairs by the scheduler: stuck (a running run without progress got its step published again), reindex (a waiting run missing from the deadline index).",
		"kind", map[string]func(scheduler.Stats) int64{
			"stuck":   func(st scheduler.Stats) int64 { return st.Repaired },
			"reindex": func(st scheduler.Stats) int64 { return st.Reindexed },
		})
	counters("durable_schedule_fires_total",
		"Fires of schedules this scheduler handled, by result: started (its run started), skipped (the overlap policy), failed (the run could not be started within the catch-up window).",
		"result", map[string]func(scheduler.Stats) int64{
			"started": func(st scheduler.Stats) int64 { return st.FiresStarted },
			"skipped": func(st scheduler.Stats) int64 { return st.FiresSkipped },
			"failed":  func(st scheduler.Stats) int64 { return st.FiresFailed },
		})
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "durable_scheduler_runs_purged_total",
		Help: "Ended runs the scheduler purged past --retention (each leaves a tombstone).",
	}, stat(func(st scheduler.Stats) int64 { return st.Purged })))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "durable_scheduler_runs_archived_total",
		Help: "Runs the scheduler wrote to the archive (--archive) before purging them.",
	}, stat(func(st scheduler.Stats) int64 { return st.Archived })))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "durable_scheduler_errors_total",
		Help: "Store or publish errors of the scheduler's sweeps and repairs (retried on the next pass).",
	}, stat(func(st scheduler.Stats) int64 { return st.Errors })))
}
