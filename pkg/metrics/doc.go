// Package metrics exposes durable's Prometheus metrics: the worker's step
// events (through the pkg/worker Metrics hook, so the worker itself does
// not import Prometheus), the idempotency signals of tool clients (Transport), the
// scheduler's sweeps, and the fleet gauges a periodic scan of the store and
// JetStream computes (Fleet). Every long-running binary serves them with
// Serve on its --metrics address.
//
//	m := metrics.Default()
//	w, _ := worker.New(worker.Config{..., Metrics: m})
//	wait, err := metrics.Start(ctx, "127.0.0.1:9464", m, log) // /metrics, /healthz, /readyz
//
// pkg/workercmd and pkg/schedulercmd do this for --metrics.
//
// Labels are bounded: workflow and step names (code-defined), tool names,
// outcomes and statuses. A run id is never a label.
// deploy/prometheus holds the alert rules on these series and
// deploy/grafana the dashboard.
package metrics
