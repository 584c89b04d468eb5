package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/bench"
)

// workerEnv makes the test binary run as the bench's worker process.
const workerEnv = "DURABLE_BENCH_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := bench.RunWorker(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// testWorker runs this test binary as the worker process.
func testWorker(args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	return cmd
}

func TestStateIsAbout200Bytes(t *testing.T) {
	s := bench.Initial("durable-redis-tp-000001")
	for n := 1; n <= bench.StepsPerRun; n++ {
		s = bench.Advance(s, n)
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 170 || len(b) > 230 {
			t.Fatalf("step %d state is %d bytes, want about 200: %s", n, len(b), b)
		}
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 50; i++ {
		d = append(d, time.Duration(51-i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 25 * time.Millisecond}, {0.99, 50 * time.Millisecond}, {0.01, time.Millisecond}, {1, 50 * time.Millisecond}} {
		if got := bench.Percentile(d, c.q); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := bench.Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile of nothing = %v", got)
	}
}

// A whole bench with tiny W and R: every system, every figure, the table
// and the RESULT lines of WORKLOAD.md.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, nats-server and worker processes")
	}
	// The fan-out phase has no tiny form (FanOutBranches is its figure):
	// it runs whole, with step bodies of 0 ms only. Its 10 ms bodies add
	// nothing the test checks and doubled the test's time under -race.
	defer func(ms []int) { bench.FanOutWorkMS = ms }(bench.FanOutWorkMS)
	bench.FanOutWorkMS = []int{0}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Runs: 20, LatencyRuns: 3, Concurrency: 16, WorkerCommand: testWorker,
		WorkerLogLevel: "warn", Progress: &progress, Dir: t.TempDir(), Parked: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	systems := []string{bench.SystemFloor, bench.SystemFloorPipelined, bench.SystemDurableRedis, bench.SystemDurableKV}
	const floors = 2
	if len(rep.Results) != len(systems) {
		t.Fatalf("%d results, want %v", len(rep.Results), systems)
	}
	for i, res := range rep.Results {
		if res.System != systems[i] {
			t.Errorf("result %d is %s, want %s", i, res.System, systems[i])
		}
		// The floors' latency runs alternate with each durable system's.
		wantLatency := 3
		if i < floors {
			wantLatency = 3 * (len(systems) - floors)
		}
		if res.Runs != 20 || res.Steps != 180 || res.LatencyRuns != wantLatency || res.Concurrency != 16 {
			t.Errorf("%s: runs %d steps %d latency runs %d (want %d) concurrency %d", res.System, res.Runs, res.Steps, res.LatencyRuns, wantLatency, res.Concurrency)
		}
		if res.ThroughputStepsPerS <= 0 || res.WallSeconds <= 0 || res.StartSeconds <= 0 || res.StartSeconds > res.WallSeconds {
			t.Errorf("%s: throughput %.0f steps/s, wall %.3fs, starts %.3fs", res.System, res.ThroughputStepsPerS, res.WallSeconds, res.StartSeconds)
		}
		if res.StepLatencyP50MS <= 0 || res.StepLatencyP99MS < res.StepLatencyP50MS {
			t.Errorf("%s: p50 %.3f ms, p99 %.3f ms", res.System, res.StepLatencyP50MS, res.StepLatencyP99MS)
		}
		if res.WorkerPeakRSSMiB <= 0 || res.WorkerCPUSPer1000Steps < 0 {
			t.Errorf("%s: peak RSS %.1f MiB, CPU %.3f s/1k steps", res.System, res.WorkerPeakRSSMiB, res.WorkerCPUSPer1000Steps)
		}
		if res.ThroughputVsFloor <= 0 || res.P50VsFloor <= 0 || res.Durability == "" {
			t.Errorf("%s: ratios %.2f %.2f, durability %q", res.System, res.ThroughputVsFloor, res.P50VsFloor, res.Durability)
		}
	}
	// The ratios are to the best floor: the faster one's throughput, the
	// lower p50 of the two.
	f0, f1 := rep.Results[0], rep.Results[1]
	best, bestP50 := f0, f0
	if f1.ThroughputStepsPerS > f0.ThroughputStepsPerS {
		best = f1
	}
	if f1.StepLatencyP50MS < f0.StepLatencyP50MS {
		bestP50 = f1
	}
	for _, res := range rep.Results {
		if res.BestFloor != best.System || res.BestFloorP50 != bestP50.System {
			t.Errorf("%s: best floors %s and %s, want %s and %s", res.System, res.BestFloor, res.BestFloorP50, best.System, bestP50.System)
		}
		if want := res.ThroughputStepsPerS / best.ThroughputStepsPerS; math.Abs(res.ThroughputVsFloor-want) > 1e-9 {
			t.Errorf("%s: throughput ratio %.3f, want %.3f", res.System, res.ThroughputVsFloor, want)
		}
		if want := res.StepLatencyP50MS / bestP50.StepLatencyP50MS; math.Abs(res.P50VsFloor-want) > 1e-9 {
			t.Errorf("%s: p50 ratio %.3f, want %.3f", res.System, res.P50VsFloor, want)
		}
	}
	// One fan-out pair per durable system, every branch read back.
	if len(rep.FanOut) != 2 {
		t.Errorf("%d fan-out results, want one per durable system: %+v", len(rep.FanOut), rep.FanOut)
	}
	for i, fo := range rep.FanOut {
		if want := systems[floors+i]; fo.System != want || fo.WorkMS != 0 || fo.Branches != bench.FanOutBranches || fo.VerifiedBranches != bench.FanOutBranches ||
			fo.FanOutSeconds <= 0 || fo.LinearSeconds <= 0 || fo.Speedup <= 0 {
			t.Errorf("fan-out result %d: %+v, want %s with %d branches verified", i, fo, want, bench.FanOutBranches)
		}
	}
	for _, phase := range []string{"floor latency", "floor-pipelined latency", "floor-pipelined throughput", "durable-redis throughput", "durable-kv warmup"} {
		if !strings.Contains(progress.String(), phase) {
			t.Errorf("progress has no line for %s:\n%s", phase, progress.String())
		}
	}
	if strings.Contains(progress.String(), "\r") {
		t.Errorf("progress to a non-terminal draws a bar:\n%q", progress.String())
	}

	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	t.Logf("progress:\n%s\nreport:%s", progress.String(), out)
	for _, col := range []string{"system", "steps/s", "p50 ms/step", "p99 ms/step", "throughput/best floor", "p50/best floor", "worker CPU s/1k steps", "worker peak RSS MiB"} {
		if !strings.Contains(out, col) {
			t.Errorf("table has no column %q:\n%s", col, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	resultRE := regexp.MustCompile(`^RESULT system=(durable-redis|durable-kv) throughput_steps_per_s=[0-9]+ step_latency_p50_ms=[0-9.]+ throughput_vs_best_floor=[0-9.]+ p50_vs_floor=[0-9.]+ runs=20 durability=\S.*$`)
	last := lines[len(lines)-2:]
	for i, want := range []string{"durable-redis", "durable-kv"} {
		m := resultRE.FindStringSubmatch(last[i])
		if m == nil || m[1] != want {
			t.Errorf("line %q is not the RESULT line of %s", last[i], want)
		}
	}

	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Results []map[string]any `json:"results"`
		Lines   []string         `json:"result_lines"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if len(decoded.Results) != 4 || len(decoded.Lines) != 2 {
		t.Fatalf("JSON has %d results and %d RESULT lines:\n%s", len(decoded.Results), len(decoded.Lines), js.String())
	}
	for _, k := range []string{"throughput_steps_per_s", "step_latency_p50_ms", "step_latency_p99_ms", "worker_cpu_s_per_1000_steps", "worker_peak_rss_mib", "throughput_vs_floor", "p50_vs_floor", "durability"} {
		if _, ok := decoded.Results[2][k]; !ok {
			t.Errorf("JSON result has no %s", k)
		}
	}
}

// The Go benchmarks run the throughput phase of `durable bench` with
// W = b.N runs started at once (servers, worker process and warm-up are
// outside the timer, so ns/op is wall time per run at that W). They
// report steps/s and the worker's CPU per 1,000 steps.
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/bench

func BenchmarkClaims9Redis(b *testing.B) {
	benchmarkSystem(b, bench.SystemDurableRedis, bench.Config{Stores: []string{bench.StoreRedis}, SkipFloor: true})
}

func BenchmarkClaims9KV(b *testing.B) {
	benchmarkSystem(b, bench.SystemDurableKV, bench.Config{Stores: []string{bench.StoreKV}, SkipFloor: true})
}

func BenchmarkFloor(b *testing.B) {
	benchmarkSystem(b, bench.SystemFloor, bench.Config{Stores: []string{bench.StoreRedis}})
}

func BenchmarkFloorPipelined(b *testing.B) {
	benchmarkSystem(b, bench.SystemFloorPipelined, bench.Config{Stores: []string{bench.StoreRedis}})
}

func benchmarkSystem(b *testing.B, system string, cfg bench.Config) {
	if testing.Short() {
		b.Skip("starts redis-server, nats-server and a worker process")
	}
	ctx := context.Background()
	cfg.WorkerCommand = testWorker
	cfg.Dir = b.TempDir()
	bn, err := bench.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer bn.Close()
	m, err := bn.Open(ctx, system)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	b.ResetTimer()
	tp, err := m.Throughput(ctx, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(tp.StepsPerS, "steps/s")
	b.ReportMetric(tp.WorkerCPU.Seconds()*1000/float64(tp.Steps), "worker-cpu-s/1k-steps")
}

// The waiting-at-scale phase alone with a small N: every run parks and is
// swept, every figure is present and plausible, the report shows each
// with its bound. Timing bounds are not asserted: they are the bench's to
// report, on whatever machine runs it.
func TestParked(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, nats-server and a worker process")
	}
	const n = 2000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		ParkedOnly: true, Parked: n, Concurrency: 32, WorkerCommand: testWorker,
		WorkerLogLevel: "warn", Progress: &progress, Dir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 0 {
		t.Errorf("only the parked phase ran, yet %d claims-9 results", len(rep.Results))
	}
	p := rep.Parked
	if p == nil {
		t.Fatal("no parked result")
	}
	if p.Runs != n || p.VerifiedExpired != n || p.WorkerParked <= n {
		t.Errorf("runs %d, verified expired %d, worker parked %d (warm-up included): want %d", p.Runs, p.VerifiedExpired, p.WorkerParked, n)
	}
	if p.StartSeconds <= 0 || p.StartsPerS <= 0 || p.ParkSeconds < p.StartSeconds || p.ParksPerS <= 0 {
		t.Errorf("starts %.2fs (%.0f/s), parks %.2fs (%.0f/s)", p.StartSeconds, p.StartsPerS, p.ParkSeconds, p.ParksPerS)
	}
	if p.WorkerRSSIdleMiB < 1 || p.WorkerRSSParkedMiB < 1 || p.WorkerRSSParkedNoGCMiB < 1 || p.WorkerPeakRSSMiB < p.WorkerRSSParkedMiB {
		t.Errorf("worker RSS idle %.1f, parked %.1f (before GC %.1f), peak %.1f MiB", p.WorkerRSSIdleMiB, p.WorkerRSSParkedMiB, p.WorkerRSSParkedNoGCMiB, p.WorkerPeakRSSMiB)
	}
	if p.WorkerGoroutinesIdle < 2 || p.WorkerGoroutinesParked < 2 || p.WorkerHeapIdleMiB <= 0 || p.WorkerHeapParkedMiB <= 0 {
		t.Errorf("worker goroutines %d -> %d, heap %.1f -> %.1f MiB", p.WorkerGoroutinesIdle, p.WorkerGoroutinesParked, p.WorkerHeapIdleMiB, p.WorkerHeapParkedMiB)
	}
	// A parked run is a record of some hundred bytes plus two index
	// entries: anything under 100 bytes or over 64 KiB is a wrong reading.
	if p.RedisBytesPerRun < 100 || p.RedisBytesPerRun > 64<<10 || p.RedisRunKeyBytes < 100 || p.RedisRunKeyBytes > p.RedisBytesPerRun*2 {
		t.Errorf("Redis %.0f bytes per parked run, run record %.0f bytes", p.RedisBytesPerRun, p.RedisRunKeyBytes)
	}
	if p.SweepSeconds <= 0 || p.FirstExpirySeconds <= 0 || p.FirstExpirySeconds > p.SweepSeconds || p.SweepErrors != 0 || p.SweepBatch < 1 {
		t.Errorf("sweep %.2fs, first expiry after %.2fs, %d errors, batch %d", p.SweepSeconds, p.FirstExpirySeconds, p.SweepErrors, p.SweepBatch)
	}
	if p.ParkCPU.Worker <= 0 || p.ParkCPU.Bench <= 0 || p.SweepCPU.Bench <= 0 {
		t.Errorf("CPU while parking %+v, while sweeping %+v", p.ParkCPU, p.SweepCPU)
	}
	// Each expired wait is read and written once (at least: a conflict
	// reads again) and owes a status event and its resumed step.
	if c := p.PerWait; c == nil || c.RedisByCommand["evalsha"] < 1 || c.RedisByCommand["hmget"] < 1 || c.NATSInMsgs < 2 {
		t.Errorf("cost of one expired wait %+v, want at least one script, one read and two messages", c)
	}
	if p.PhaseSeconds < p.ParkSeconds+p.SweepSeconds {
		t.Errorf("phase %.1fs, shorter than parking %.1fs and sweeping %.1fs", p.PhaseSeconds, p.ParkSeconds, p.SweepSeconds)
	}

	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s\nreport:%s", progress.String(), text.String())
	for _, want := range []string{"worker RSS, idle -> 2000 parked", "within 10% of idle", "worker goroutines", "must not grow",
		"Redis memory per parked run", "<= 2048 B", "sweep of 2000 expired waits", "< 20s", "runs/s", "cost of one expired wait"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report has no %q", want)
		}
	}
	if strings.Contains(text.String(), "steps/s") || strings.Contains(text.String(), "RESULT system=durable-redis throughput") {
		t.Errorf("report of the parked phase alone shows claims-9 figures:\n%s", text.String())
	}
	if !regexp.MustCompile(`(?m)^RESULT system=durable-redis phase=parked runs=2000 sweep_waits_per_s=[0-9]+ sweep_s=[0-9.]+ durability=default$`).MatchString(text.String()) {
		t.Errorf("report has no RESULT line of the sweep:\n%s", text.String())
	}
	if got := regexp.MustCompile(`\b(PASS|FAIL)\b`).FindAllString(text.String(), -1); len(got) != 4 {
		t.Errorf("%d verdicts in the report, want 4 (RSS, goroutines, Redis, sweep)", len(got))
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Parked map[string]any `json:"parked"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"worker_rss_idle_mib", "worker_rss_parked_mib", "worker_goroutines_idle", "worker_goroutines_parked",
		"redis_bytes_per_parked_run", "sweep_s", "starts_per_s", "phase_s", "worker_rss_ok", "sweep_ok"} {
		if _, ok := decoded.Parked[k]; !ok {
			t.Errorf("JSON parked has no %s", k)
		}
	}
}

func TestParkedConfig(t *testing.T) {
	for _, cfg := range []bench.Config{
		{ParkedOnly: true, Parked: -1},
		{ParkedOnly: true, Stores: []string{bench.StoreKV}},
	} {
		if _, err := bench.Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) ran", cfg)
		}
	}
}
