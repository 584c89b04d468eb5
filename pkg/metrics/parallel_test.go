package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

type n struct {
	N int `json:"n"`
}

// Issue 15: a fan-out counts one join and leaves no branch in flight; a
// step that starts children counts them; signals are counted by channel
// and outcome.
func TestParallelWorkMetrics(t *testing.T) {
	f := testfleet.New(t, "redis")
	fan := steps.New[n]("mfan", 1)
	join := fan.Ref("join")
	fanLeaf := steps.AddBranch(fan, "leaf", func(_ context.Context, _ *steps.Context, i int) (int, error) { return i, nil })
	fan.Step("split", func(_ context.Context, _ *steps.Context, st n) (steps.Outcome[n], error) {
		return steps.FanOut(join, st, fanLeaf.With(1), fanLeaf.With(2), fanLeaf.With(3)), nil
	}).
		Step("join", func(_ context.Context, _ *steps.Context, st n) (steps.Outcome[n], error) {
			return steps.Complete(st), nil
		})
	leaf := steps.New[n]("mleaf", 1).
		Step("only", func(_ context.Context, _ *steps.Context, st n) (steps.Outcome[n], error) {
			return steps.Complete(st), nil
		})
	parent := steps.New[n]("mparent", 1)
	end := parent.Ref("end")
	parent.
		Step("start", func(_ context.Context, _ *steps.Context, st n) (steps.Outcome[n], error) {
			return steps.StartChildren(end, st, steps.Child{Workflow: "mleaf"}, steps.Child{Workflow: "mleaf"}), nil
		}).
		Step("end", func(_ context.Context, _ *steps.Context, st n) (steps.Outcome[n], error) {
			return steps.Complete(st), nil
		})
	m := metrics.New()
	f.StartWorker(steps.NewRegistry().MustRegister(fan, leaf, parent), func(c *worker.Config) { c.Metrics = m })
	f.Start("mfan", "mfan-1", "")
	f.Start("mparent", "mparent-1", "")
	f.WaitStatus("mfan-1", checkpoint.StatusCompleted, 30*time.Second)
	f.WaitStatus("mparent-1", checkpoint.StatusCompleted, 30*time.Second)
	m.SignalReceived("api", "received")
	m.SignalReceived("event", "refused")

	s := scrape(t, serve(t, metrics.Mux(m)))
	s.want(t, `durable_joins_total{workflow="mfan"}`, 1)
	s.want(t, `durable_branches_in_flight{workflow="mfan"}`, 0)
	s.want(t, `durable_child_runs_total{workflow="mparent"}`, 2)
	s.want(t, `durable_steps_total{outcome="committed",step="leaf",workflow="mfan"}`, 3)
	s.want(t, `durable_signals_total{channel="api",outcome="received"}`, 1)
	s.want(t, `durable_signals_total{channel="event",outcome="refused"}`, 1)
}
