package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a bench measured.
type Report struct {
	Workload    string `json:"workload"`
	StateBytes  int    `json:"state_bytes"`
	Runs        int    `json:"runs"`
	LatencyRuns int    `json:"latency_runs"`
	Concurrency int    `json:"concurrency"`
	// FlowLimit is durable's concurrency limit on every step (0: none).
	FlowLimit      int    `json:"flow_limit,omitempty"`
	CPUs           int    `json:"cpus"`
	OS             string `json:"os"`
	NATSServer     string `json:"nats_server"`
	RedisServer    string `json:"redis_server,omitempty"`
	WorkerLogLevel string `json:"worker_log_level"`
	// Durability is the servers' sync mode: default or strict.
	Durability  string    `json:"durability"`
	Started     time.Time `json:"started"`
	WallSeconds float64   `json:"wall_s"`
	Results     []Result  `json:"results"`
	// Parked is the waiting-at-scale phase, when it ran.
	Parked *ParkedResult `json:"parked,omitempty"`
	// FanOut is the fan-out phase, when it ran: per store, one run of
	// 1,000 branches against one run of 1,000 steps in line.
	FanOut []FanOutResult `json:"fanout,omitempty"`
	// History is the history phase, when it ran: per store.
	History []HistoryResult `json:"history,omitempty"`
}

// Result is one system's figures.
type Result struct {
	System      string `json:"system"`
	Durability  string `json:"durability"`
	Runs        int    `json:"runs"`
	Steps       int    `json:"steps"`
	LatencyRuns int    `json:"latency_runs"`
	Concurrency int    `json:"concurrency"`
	// Throughput phase: W runs started at once, from the first start to
	// the last completion.
	WallSeconds         float64 `json:"wall_s"`
	StartSeconds        float64 `json:"starts_s"` // until every start returned
	ThroughputStepsPerS float64 `json:"throughput_steps_per_s"`
	// Latency phase: R runs one at a time, run time / 9, nearest rank.
	StepLatencyP50MS float64 `json:"step_latency_p50_ms"`
	StepLatencyP99MS float64 `json:"step_latency_p99_ms"`
	// CPU seconds per 1,000 steps over the throughput phase: the worker
	// process, redis-server, and the bench process (its driver and the
	// embedded nats-server).
	WorkerCPUSPer1000Steps float64 `json:"worker_cpu_s_per_1000_steps"`
	RedisCPUSPer1000Steps  float64 `json:"redis_cpu_s_per_1000_steps"`
	BenchCPUSPer1000Steps  float64 `json:"bench_process_cpu_s_per_1000_steps"`
	// WorkerPeakRSSMiB is the worker's VmHWM at the end.
	WorkerPeakRSSMiB float64 `json:"worker_peak_rss_mib"`
	// Ratios to the best floor measured in the same bench (0 without a
	// floor): throughput / the highest floor throughput, p50 / the lowest
	// floor p50. BestFloor and BestFloorP50 name those floors.
	ThroughputVsFloor float64 `json:"throughput_vs_floor,omitempty"`
	P50VsFloor        float64 `json:"p50_vs_floor,omitempty"`
	BestFloor         string  `json:"best_floor,omitempty"`
	BestFloorP50      string  `json:"best_floor_p50,omitempty"`
	// PerStep is what a step cost the servers in the throughput phases.
	PerStep *StepCost `json:"per_step,omitempty"`
}

// bestFloors are the floor with the highest throughput and the floor
// with the lowest p50, nil without floors.
func (r *Report) bestFloors() (throughput, p50 *Result) {
	for i := range r.Results {
		f := &r.Results[i]
		if !isFloor(f.System) {
			continue
		}
		if throughput == nil || f.ThroughputStepsPerS > throughput.ThroughputStepsPerS {
			throughput = f
		}
		if f.StepLatencyP50MS > 0 && (p50 == nil || f.StepLatencyP50MS < p50.StepLatencyP50MS) {
			p50 = f
		}
	}
	return throughput, p50
}

func (r *Report) ratios() {
	tf, pf := r.bestFloors()
	for i := range r.Results {
		res := &r.Results[i]
		if tf != nil && tf.ThroughputStepsPerS > 0 {
			res.ThroughputVsFloor = res.ThroughputStepsPerS / tf.ThroughputStepsPerS
			res.BestFloor = tf.System
		}
		if pf != nil {
			res.P50VsFloor = res.StepLatencyP50MS / pf.StepLatencyP50MS
			res.BestFloorP50 = pf.System
		}
	}
}

func (r *Report) describe() string {
	s := fmt.Sprintf("%d steps, %d-byte state; W=%d runs at once, R=%d runs one at a time; one worker process at concurrency %d; %d CPUs",
		StepsPerRun, r.StateBytes, r.Runs, r.LatencyRuns, r.Concurrency, r.CPUs)
	if r.FlowLimit > 0 {
		s += fmt.Sprintf("; every durable step takes a slot of a concurrency limit of %d", r.FlowLimit)
	}
	return s
}

// ResultLines are the RESULT lines of WORKLOAD.md, one per durable store.
func (r *Report) ResultLines() []string {
	var out []string
	for _, res := range r.Results {
		if isFloor(res.System) {
			continue
		}
		line := fmt.Sprintf("RESULT system=%s throughput_steps_per_s=%.0f step_latency_p50_ms=%.3f", res.System, res.ThroughputStepsPerS, res.StepLatencyP50MS)
		if res.ThroughputVsFloor > 0 {
			line += fmt.Sprintf(" throughput_vs_best_floor=%.2f p50_vs_floor=%.2f", res.ThroughputVsFloor, res.P50VsFloor)
		}
		out = append(out, line+fmt.Sprintf(" runs=%d durability=%s", res.Runs, res.Durability))
	}
	if p := r.Parked; p != nil && p.SweepSeconds > 0 {
		out = append(out, fmt.Sprintf("RESULT system=%s phase=parked runs=%d sweep_waits_per_s=%.0f sweep_s=%.2f durability=%s", p.System, p.Runs, p.ExpiredPerS, p.SweepSeconds, r.Durability))
	}
	for _, h := range r.History {
		if h.Error == "" {
			out = append(out, h.resultLine(r.Durability))
		}
	}
	return out
}

// WriteText prints the table, the notes and the RESULT lines last.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	if len(r.Results) > 0 {
		fmt.Fprintf(&b, "\n%s: %s\n", r.Workload, r.describe())
	} else {
		b.WriteString("\n")
	}
	natsSync, redisSync := "default sync", "everysec"
	if r.Durability == DurabilityStrict {
		natsSync, redisSync = "sync always", "always"
	}
	fmt.Fprintf(&b, "servers on 127.0.0.1: nats-server %s embedded (JetStream file store, %s)", r.NATSServer, natsSync)
	if r.RedisServer != "" {
		fmt.Fprintf(&b, ", redis-server %s (appendonly yes, appendfsync %s)", r.RedisServer, redisSync)
	}
	fmt.Fprintf(&b, "; worker log level %s\n\n", r.WorkerLogLevel)
	if len(r.Results) > 0 {
		if err := r.writeClaims(&b); err != nil {
			return err
		}
		if err := r.writeCosts(&b); err != nil {
			return err
		}
	}
	if len(r.FanOut) > 0 {
		writeFanOut(&b, r.FanOut)
	}
	if r.Parked != nil {
		if err := r.Parked.writeText(&b); err != nil {
			return err
		}
	}
	if err := writeHistory(&b, r.History); err != nil {
		return err
	}
	for _, l := range r.ResultLines() {
		b.WriteString(l + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeClaims prints the claims-9 table and its notes.
func (r *Report) writeClaims(b *strings.Builder) error {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tsteps/s\tp50 ms/step\tp99 ms/step\tthroughput/best floor\tp50/best floor\tworker CPU s/1k steps\tworker peak RSS MiB\t")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.3f\t%.3f\t%s\t%s\t%.3f\t%.1f\t\n", res.System, res.ThroughputStepsPerS,
			res.StepLatencyP50MS, res.StepLatencyP99MS, ratio(res.ThroughputVsFloor), ratio(res.P50VsFloor),
			res.WorkerCPUSPer1000Steps, res.WorkerPeakRSSMiB)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(b)
	for _, res := range r.Results {
		fmt.Fprintf(b, "%-14s %d steps in %.2fs (all %d runs started after %.2fs); CPU s/1k steps: worker %.3f, redis-server %.3f, bench process (driver + nats-server) %.3f\n",
			res.System, res.Steps, res.WallSeconds, res.Runs, res.StartSeconds,
			res.WorkerCPUSPer1000Steps, res.RedisCPUSPer1000Steps, res.BenchCPUSPer1000Steps)
	}
	if tf, pf := r.bestFloors(); tf != nil {
		b.WriteString("the floors are bare pipelines: floor pulls, SET NXs in Redis, publishes the next step with a Nats-Msg-Id, waits for the PubAck\n" +
			"and acks, one step at a time; floor-pipelined does the same per batch of what arrived (SET NX pipelined, publishes async,\n" +
			"PubAcks collected, then acks). Both are Redis-based, as in WORKLOAD.md: durable-kv's ratios compare it to the same floors.\n")
		fmt.Fprintf(b, "ratios are to the best floor: %s for throughput, %s for p50.\n", tf.System, pf.System)
	}
	b.WriteString("\n")
	return nil
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

// WriteJSON prints the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Report
		ResultLines []string `json:"result_lines"`
	}{r, r.ResultLines()})
}

// stateBytes is the size of a claims-9 state as its last step stores it.
func stateBytes() int {
	s := Initial(runID(SystemDurableRedis+"-tp", 0))
	for n := 1; n <= StepsPerRun; n++ {
		s = Advance(s, n)
	}
	b, _ := json.Marshal(s)
	return len(b)
}

// writeFanOut prints the fan-out phase's table.
func writeFanOut(b *strings.Builder, rs []FanOutResult) {
	fmt.Fprintf(b, "fan-out: one run of %d branches (in parallel on one worker) against one run of %d steps in line, same servers\n", rs[0].Branches, rs[0].Branches)
	tw := tabwriter.NewWriter(b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "system\tbody\tfan-out s\tsteps/s\tin line s\tsteps/s\tspeedup")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d ms\t%.2f\t%.0f\t%.2f\t%.0f\t%.1f×\n", r.System, r.WorkMS, r.FanOutSeconds, r.FanOutStepsPerS, r.LinearSeconds, r.LinearStepsPerS, r.Speedup)
	}
	_ = tw.Flush()
	b.WriteString("\n")
}
