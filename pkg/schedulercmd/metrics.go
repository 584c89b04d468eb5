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
	for action, f := range map[string]func(scheduler.Stats) int64{
		"rejected":  func(st scheduler.Stats) int64 { return st.Rejected },
		"escalated": func(st scheduler.Stats) int64 { return st.Escalated },
		"reminded":  func(st scheduler.Stats) int64 { return st.Reminded },
		"woke":      func(st scheduler.Stats) int64 { return st.Woke },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "durable_scheduler_expired_waits_total",
			Help:        "Waits past their deadline the scheduler handled, by action: rejected (policy reject, or escalation and reminders used up), escalated, reminded, woke (a durable timer).",
			ConstLabels: prometheus.Labels{"action": action},
		}, stat(f)))
	}
	for kind, f := range map[string]func(scheduler.Stats) int64{
		"stuck":   func(st scheduler.Stats) int64 { return st.Repaired },
		"reindex": func(st scheduler.Stats) int64 { return st.Reindexed },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "durable_scheduler_repairs_total",
			Help:        "Repairs by the scheduler: stuck (a running run without progress got its step published again), reindex (a waiting run missing from the deadline index).",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, stat(f)))
	}
	for result, f := range map[string]func(scheduler.Stats) int64{
		"started": func(st scheduler.Stats) int64 { return st.FiresStarted },
		"skipped": func(st scheduler.Stats) int64 { return st.FiresSkipped },
		"failed":  func(st scheduler.Stats) int64 { return st.FiresFailed },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "durable_schedule_fires_total",
			Help:        "Fires of schedules this scheduler handled, by result: started (its run started), skipped (the overlap policy), failed (the run could not be started within the catch-up window).",
			ConstLabels: prometheus.Labels{"result": result},
		}, stat(f)))
	}
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
