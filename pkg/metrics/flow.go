package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// flowMetrics are the collectors of the fleet-wide rate limits
// (worker.Config.Flow), by resource: the names steps.Resource gives,
// which the workflows' code bounds.
type flowMetrics struct {
	throttled *prometheus.CounterVec
	tokenWait *prometheus.HistogramVec
	slowdowns *prometheus.CounterVec
	// The concurrency limits (steps.Uses), by resource; not by fairness
	// key, which the runs' input bounds, not the code.
	slotWait *prometheus.HistogramVec
	inUse    *prometheus.GaugeVec
	waiting  *prometheus.GaugeVec
}

func newFlowMetrics(f factory) flowMetrics {
	return flowMetrics{
		throttled: f.counter("durable_flow_throttled_total",
			"Calls of a rate-limited resource (steps.Resource) that found no token at once, by how they went on: waited (in their step, then made) or handed_back (the step went back to the queue until a token, not counted as an attempt).",
			"resource", "how"),
		tokenWait: f.histogram("durable_flow_token_wait_seconds",
			"Time a throttled call waited in its step for a token of its resource before it was made (waits of a step handed back to the queue are not in it).",
			[]float64{.005, .01, .025, .05, .1, .25, .5, 1, 2, 3},
			"resource"),
		slowdowns: f.counter("durable_flow_slowdowns_total",
			"Rate-limit answers (HTTP 429 and the like) to calls of a resource, each of which slowed the resource down fleet-wide for the provider's Retry-After. Fewer than one per worker per slow-down: the others waited.",
			"resource"),
		slotWait: f.histogram("durable_flow_slot_wait_seconds",
			"Time a step that found no slot of its resource's concurrency limit (steps.Uses) queued in its worker before it got one.",
			[]float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
			"resource"),
		inUse: f.gauge("durable_flow_slots_in_use",
			"Slots of a resource's concurrency limit this worker's steps hold now (sampled every second); summed over the fleet, at most the limit.",
			"resource"),
		waiting: f.gauge("durable_flow_steps_waiting",
			"Steps queued in this worker for a slot of a resource's concurrency limit now (sampled every second): holding no worker slot, their messages unacked.",
			"resource"),
	}
}

// SlotWaited implements worker.SlotMetrics.
func (m *Metrics) SlotWaited(resource string, d time.Duration) {
	m.flow.slotWait.WithLabelValues(resource).Observe(d.Seconds())
}

// Slots implements worker.SlotMetrics.
func (m *Metrics) Slots(resource string, inUse, waiting int) {
	m.flow.inUse.WithLabelValues(resource).Set(float64(inUse))
	m.flow.waiting.WithLabelValues(resource).Set(float64(waiting))
}

// Throttled implements worker.FlowMetrics.
func (m *Metrics) Throttled(resource string, handedBack bool) {
	how := "waited"
	if handedBack {
		how = "handed_back"
	}
	m.flow.throttled.WithLabelValues(resource, how).Inc()
}

// TokenWaited implements worker.FlowMetrics.
func (m *Metrics) TokenWaited(resource string, d time.Duration) {
	m.flow.tokenWait.WithLabelValues(resource).Observe(d.Seconds())
}

// SlowedDown implements worker.FlowMetrics.
func (m *Metrics) SlowedDown(resource string, _ time.Duration) {
	m.flow.slowdowns.WithLabelValues(resource).Inc()
}
