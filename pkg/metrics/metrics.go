package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds a registry and the collectors of one process. It
// implements pkg/worker's Metrics hook.
type Metrics struct {
	reg *prometheus.Registry

	steps           *prometheus.CounterVec
	stepDuration    *prometheus.HistogramVec
	checkpointBytes *prometheus.HistogramVec
	checkpointGrow  *prometheus.HistogramVec
	resumes         *prometheus.CounterVec
	effectReplays   *prometheus.CounterVec
	callReplays     *prometheus.CounterVec
	mismatches      *prometheus.CounterVec
	deadLetters     *prometheus.CounterVec
	toolReplays     *prometheus.CounterVec
	toolConflicts   *prometheus.CounterVec
	branches        *prometheus.GaugeVec
	joins           *prometheus.CounterVec
	children        *prometheus.CounterVec
	signals         *prometheus.CounterVec
	flow            flowMetrics

	readiness readiness
}

var (
	defaultOnce sync.Once
	defaultM    *Metrics
)

// Default is the process's Metrics, shared by every component a binary
// runs (durable dev runs workers, a scheduler and the approver in one).
func Default() *Metrics {
	defaultOnce.Do(func() { defaultM = New() })
	return defaultM
}

// New returns Metrics on a fresh registry holding the Go runtime and
// process collectors too.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{reg}
	m := &Metrics{reg: reg}
	m.steps = f.counter("durable_steps_total",
		"Step deliveries handled by workers, by outcome: committed, completed, failed, parked, retry, dead, stale, replayed (already committed), lost (another writer won), malformed, error (transient, released for redelivery), throttled (a call's rate limit handed the step back; not an attempt), queued (the step waits in its worker for a slot of a concurrency limit, and is handled again when it gets one).",
		"workflow", "step", "outcome")
	m.stepDuration = f.histogram("durable_step_duration_seconds",
		"Time to handle a step delivery that ran the step body (outcomes committed, completed, failed, parked, retry, dead), from delivery to ack.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		"workflow", "step")
	m.checkpointBytes = f.histogram("durable_checkpoint_size_bytes",
		"Size of committed checkpoints (JSON bytes).",
		prometheus.ExponentialBuckets(256, 4, 8), // 256 B .. 4 MiB
		"workflow", "step")
	m.checkpointGrow = f.histogram("durable_checkpoint_growth_bytes",
		"Bytes a committed checkpoint grew over the step before's; a shrinking checkpoint counts as 0. State that grows every step (an agent's history) shows here before it hits the budget.",
		[]float64{0, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10},
		"workflow", "step")
	m.resumes = f.counter("durable_resumes_total",
		"Steps resumed on a redelivery no recorded failure explains: the worker before crashed, hung past its ack wait or lost its ack. Divide by completed runs for the resume rate.",
		"workflow")
	m.effectReplays = f.counter("durable_idempotency_replays_total",
		"Side effects whose idempotency key had been seen before (the provider answered the original result, or the journal held it), by tool: the effect's name or its step's name.",
		"workflow", "tool")
	m.callReplays = f.counter("durable_journal_replays_total",
		"Calls (steps.Call) answered from the journal on a retried step instead of being made again.",
		"workflow", "step")
	m.mismatches = f.counter("durable_journal_mismatches_total",
		"Journaled calls replayed with different arguments (steps.ErrJournalMismatch): the same key with another payload, a bug in the workflow. The run goes to the dead letters.",
		"workflow", "step")
	m.deadLetters = f.counter("durable_dead_letters_total",
		"Runs a worker sent to the dead letters, by the step they died at.",
		"workflow", "step")
	m.toolReplays = f.counter("durable_tool_idempotent_replays_total",
		"Responses of a tool's API to a keyed request that said it replayed the original result (Idempotent-Replayed: true).",
		"tool")
	m.toolConflicts = f.counter("durable_idempotency_conflicts_total",
		"Requests a tool's API refused because their idempotency key was already used with a different payload (HTTP 422): a bug, never retried into success.",
		"tool")
	m.branches = f.gauge("durable_branches_in_flight",
		"Branches of fan-outs whose bodies this process is running now.",
		"workflow")
	m.joins = f.counter("durable_joins_total",
		"Joins published: a worker found every branch of a fan-out committed and published the join (once per fan-out, more only when several writers counted all in at once; the join itself runs once).",
		"workflow")
	m.children = f.counter("durable_child_runs_total",
		"Child runs started by steps (a redelivery of the starting step counts them again; each is created once).",
		"workflow")
	m.signals = f.counter("durable_signals_total",
		"Signals this process took (the approver's API and signed events), by channel and outcome: received, duplicate (an id delivered before), refused (unknown run or signal, ended run, malformed).",
		"channel", "outcome")
	m.flow = newFlowMetrics(f)
	return m
}

// BranchRunning implements worker.Metrics.
func (m *Metrics) BranchRunning(workflow string, delta int) {
	m.branches.WithLabelValues(workflow).Add(float64(delta))
}

// JoinPublished implements worker.Metrics.
func (m *Metrics) JoinPublished(workflow string) { m.joins.WithLabelValues(workflow).Inc() }

// ChildrenStarted implements worker.Metrics.
func (m *Metrics) ChildrenStarted(workflow string, n int) {
	m.children.WithLabelValues(workflow).Add(float64(n))
}

// SignalReceived counts a signal the approver took through channel (api
// or event) with outcome received, duplicate or refused.
func (m *Metrics) SignalReceived(channel, outcome string) {
	m.signals.WithLabelValues(channel, outcome).Inc()
}

// Registry is the registry to add collectors to (Fleet, the scheduler's).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// executed are the outcomes whose deliveries ran the step body.
var executed = map[string]bool{"committed": true, "completed": true, "failed": true, "parked": true, "retry": true, "dead": true}

// StepDone implements worker.Metrics.
func (m *Metrics) StepDone(workflow, step, outcome string, d time.Duration) {
	m.StepDoneInTrace(workflow, step, outcome, d, "")
}

// StepDoneInTrace implements worker.TracedMetrics: StepDone, with the
// trace as an exemplar of the duration (trace_id), which /metrics shows
// to a scraper that asks for OpenMetrics (Prometheus with exemplar
// storage on) and Grafana links to the trace.
func (m *Metrics) StepDoneInTrace(workflow, step, outcome string, d time.Duration, traceID string) {
	m.steps.WithLabelValues(workflow, step, outcome).Inc()
	if !executed[outcome] {
		return
	}
	h := m.stepDuration.WithLabelValues(workflow, step)
	if eo, ok := h.(prometheus.ExemplarObserver); ok && traceID != "" {
		eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
		return
	}
	h.Observe(d.Seconds())
}

// CheckpointCommitted implements worker.Metrics.
func (m *Metrics) CheckpointCommitted(workflow, step string, bytes, growth int) {
	m.checkpointBytes.WithLabelValues(workflow, step).Observe(float64(bytes))
	m.checkpointGrow.WithLabelValues(workflow, step).Observe(float64(max(growth, 0)))
}

// Resumed implements worker.Metrics.
func (m *Metrics) Resumed(workflow, _ string) { m.resumes.WithLabelValues(workflow).Inc() }

// EffectReplayed implements worker.Metrics.
func (m *Metrics) EffectReplayed(workflow, tool string) {
	m.effectReplays.WithLabelValues(workflow, tool).Inc()
}

// CallsReplayed implements worker.Metrics.
func (m *Metrics) CallsReplayed(workflow, step string, n int) {
	m.callReplays.WithLabelValues(workflow, step).Add(float64(n))
}

// JournalMismatch implements worker.Metrics.
func (m *Metrics) JournalMismatch(workflow, step string) {
	m.mismatches.WithLabelValues(workflow, step).Inc()
}

// DeadLettered implements worker.Metrics.
func (m *Metrics) DeadLettered(workflow, step string) {
	m.deadLetters.WithLabelValues(workflow, step).Inc()
}

type factory struct{ reg prometheus.Registerer }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}
