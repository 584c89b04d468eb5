package bench_test

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/bench"
)

// The history phase on Redis with 2,000 ended runs: its RESULT line
// parses and every figure in it is positive. No figure is held to a bound
// here (the machine is shared); the phase itself checks what it reads:
// pages of 50, the 1,000 waiting runs, their gauge.
func TestHistoryPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, nats-server and worker processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	const n = 2000
	rep, err := bench.Run(ctx, bench.Config{
		Stores: []string{bench.StoreRedis}, History: n, HistoryRounds: 3, HistoryWaiting: 100, WorkerCommand: testWorker,
		WorkerLogLevel: "warn", Progress: &progress, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Failures(); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if len(rep.Results) != 0 || rep.Parked != nil || len(rep.FanOut) != 0 {
		t.Errorf("the history phase ran with others: %d results, parked %v, %d fan-out", len(rep.Results), rep.Parked != nil, len(rep.FanOut))
	}
	var line string
	for _, l := range rep.ResultLines() {
		if strings.Contains(l, " phase=history ") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no history RESULT line in %q", rep.ResultLines())
	}
	fields := map[string]string{}
	for i, f := range strings.Fields(line) {
		if i == 0 {
			if f != "RESULT" {
				t.Fatalf("line %q does not start with RESULT", line)
			}
			continue
		}
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("field %q of %q is not key=value", f, line)
		}
		fields[k] = v
	}
	if fields["system"] != bench.SystemDurableRedis || fields["ended_runs"] != strconv.Itoa(n) {
		t.Errorf("system %q, ended_runs %q in %q", fields["system"], fields["ended_runs"], line)
	}
	for _, k := range []string{"repair_ms", "list_page_ms", "gauges_ms", "start_p50_ms", "worst_ratio_to_empty", "bytes_per_ended_run", "runs_list_ms", "api_runs_ms", "worst_ratio_to_twin",
		"bytes_per_tombstone", "purge_runs_per_s", "worst_ratio_during_purge", "step_p50_ratio_during_purge"} {
		v, err := strconv.ParseFloat(fields[k], 64)
		if err != nil || v <= 0 {
			t.Errorf("%s=%q in %q: want a positive number", k, fields[k], line)
		}
	}
	h := rep.History[0]
	if h.Template.Keys == 0 || h.Filled.Keys != h.Template.Keys || h.FillRunsPerS <= 0 || h.Empty.HeapInuseMiB <= 0 || h.Full.ScanMS <= 0 {
		t.Errorf("template %v, filled %v, fill %.0f runs/s, heap %.1f MiB, scan %.2f ms",
			h.Template, h.Filled, h.FillRunsPerS, h.Empty.HeapInuseMiB, h.Full.ScanMS)
	}
	// The twin runs steps too, so step p50 and the purge's cost compare
	// to it in the same rounds.
	if h.TwinFull.StepP50MS <= 0 || h.TwinDuringPurge.StepP50MS <= 0 || h.PacedPurgeRunsPerS <= 0 {
		t.Errorf("twin step p50 %.3f ms, during the purge %.3f ms, paced purge %.0f runs/s: want each measured",
			h.TwinFull.StepP50MS, h.TwinDuringPurge.StepP50MS, h.PacedPurgeRunsPerS)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "the purge's cost") {
		t.Errorf("the report has no table of the purge's cost:\n%s", text.String())
	}
	t.Logf("%s\n%s", progress.String(), text.String())
}
