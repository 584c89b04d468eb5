package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

const (
	// warmupRuns run one at a time when a meter opens, unmeasured:
	// connections, scripts and consumers are in place when timing starts.
	warmupRuns = 5
	// startConcurrency bounds the starts in flight in the throughput phase.
	startConcurrency = 32
	// stallTimeout fails a phase in which no step finished for that long.
	stallTimeout = 30 * time.Second
)

// Meter measures one system through its own worker process.
type Meter struct {
	b      *Bench
	sys    *system
	worker *workerProc
	acks   *ackWatcher
	phases map[string]int // runs started per phase name, for unique run ids
}

// latencyBlock is how many one-at-a-time runs of a system alternate with
// as many of each floor's.
const latencyBlock = 5

// measureAll measures every system. The floors' workers stay up the whole
// time; their latency runs alternate, in blocks, with each durable
// system's, and their throughput phases with theirs, so that all see the
// same machine: on a shared machine the floor alone moved by 1.6x (steps/s)
// and 1.8x (p50) between runs minutes apart. Durable's systems run one
// after another (they share the step stream's consumer).
func (b *Bench) measureAll(ctx context.Context) ([]Result, error) {
	var floors []*floorRuns
	for _, sys := range b.systems {
		if !isFloor(sys.name) {
			continue
		}
		m, err := b.Open(ctx, sys.name)
		if err != nil {
			return nil, err
		}
		defer m.Close()
		floors = append(floors, &floorRuns{m: m})
	}
	var results []Result
	for _, sys := range b.systems {
		if isFloor(sys.name) {
			continue
		}
		res, err := b.measureBesideFloors(ctx, sys.name, floors)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	var out []Result
	for _, f := range floors {
		if len(f.lat) > 0 {
			b.progress.linef("%-36s %d runs one at a time, in the durable systems' latency phases: p50 %.3f ms/step, p99 %.3f ms/step",
				f.m.sys.name+" latency", len(f.lat), ms(Percentile(f.lat, 0.5))/StepsPerRun, ms(Percentile(f.lat, 0.99))/StepsPerRun)
		}
		if len(f.tps) == 0 { // the floors alone
			tp, err := f.m.Throughput(ctx, b.cfg.Runs)
			if err != nil {
				return nil, err
			}
			f.tps = append(f.tps, tp)
		}
		out = append(out, b.result(f.m, f.lat, f.tps))
	}
	return append(out, results...), nil
}

// floorRuns is a floor's meter and what its runs alternating with the
// durable systems' measured.
type floorRuns struct {
	m   *Meter
	lat []time.Duration
	tps []Throughput
}

// measureBesideFloors measures durable system name, its phases
// alternating with the floors'.
func (b *Bench) measureBesideFloors(ctx context.Context, name string, floors []*floorRuns) (Result, error) {
	m, err := b.Open(ctx, name)
	if err != nil {
		return Result{}, err
	}
	defer m.Close()
	lat, err := b.latency(ctx, m, floors)
	if err != nil {
		return Result{}, err
	}
	// Throughput: the floors' and this system's phases alternate too.
	var tps []Throughput
	for range throughputRounds {
		for _, f := range floors {
			tp, err := f.m.Throughput(ctx, b.cfg.Runs)
			if err != nil {
				return Result{}, err
			}
			f.tps = append(f.tps, tp)
		}
		tp, err := m.Throughput(ctx, b.cfg.Runs)
		if err != nil {
			return Result{}, err
		}
		tps = append(tps, tp)
	}
	return b.result(m, lat, tps), nil
}

// latency runs m's latency runs one at a time, in blocks alternating with
// as many of each floor's.
func (b *Bench) latency(ctx context.Context, m *Meter, floors []*floorRuns) ([]time.Duration, error) {
	var lat []time.Duration
	alternating := ""
	if len(floors) > 0 {
		alternating = ", alternating with the floors' in blocks of " + strconv.Itoa(latencyBlock)
	}
	b.progress.begin(m.sys.name+" latency", b.cfg.LatencyRuns)
	for done := 0; done < b.cfg.LatencyRuns; done += latencyBlock {
		n := min(latencyBlock, b.cfg.LatencyRuns-done)
		for _, f := range floors {
			d, err := f.m.runsOneAtATime(ctx, "latency", n, false)
			if err != nil {
				return nil, err
			}
			f.lat = append(f.lat, d...)
		}
		d, err := m.runsOneAtATime(ctx, "latency", n, false)
		if err != nil {
			return nil, err
		}
		lat = append(lat, d...)
		b.progress.update(len(lat))
	}
	if len(lat) > 0 {
		b.progress.end("%d runs one at a time%s: p50 %.3f ms/step, p99 %.3f ms/step",
			len(lat), alternating, ms(Percentile(lat, 0.5))/StepsPerRun, ms(Percentile(lat, 0.99))/StepsPerRun)
	} else {
		b.progress.end("skipped")
	}
	return lat, nil
}

// throughputRounds is how many throughput phases each durable system
// runs, each right after one of each floor's.
const throughputRounds = 2

// result is a system's figures from its latency runs and throughput
// phases (steps/s over all phases, CPU per step over all of them).
func (b *Bench) result(m *Meter, lat []time.Duration, tps []Throughput) Result {
	res := Result{
		System: m.sys.name, Runs: b.cfg.Runs, Steps: b.cfg.Runs * StepsPerRun,
		LatencyRuns: len(lat), Concurrency: b.cfg.Concurrency, Durability: m.sys.durability,
	}
	if len(lat) > 0 {
		res.StepLatencyP50MS = ms(Percentile(lat, 0.50)) / StepsPerRun
		res.StepLatencyP99MS = ms(Percentile(lat, 0.99)) / StepsPerRun
	}
	var steps int
	var wall, starts, worker, redis, self time.Duration
	for _, tp := range tps {
		steps += tp.Steps
		wall += tp.Wall
		starts += tp.Starts
		worker += tp.WorkerCPU
		redis += tp.RedisCPU
		self += tp.BenchCPU
	}
	if n := len(tps); n > 0 && steps > 0 {
		per1k := float64(steps) / 1000
		res.ThroughputStepsPerS = float64(steps) / wall.Seconds()
		res.WallSeconds = wall.Seconds() / float64(n)
		res.StartSeconds = starts.Seconds() / float64(n)
		res.WorkerCPUSPer1000Steps = worker.Seconds() / per1k
		res.RedisCPUSPer1000Steps = redis.Seconds() / per1k
		res.BenchCPUSPer1000Steps = self.Seconds() / per1k
	}
	res.PerStep = averageCost(tps)
	if rss, err := m.WorkerPeakRSS(); err == nil {
		res.WorkerPeakRSSMiB = float64(rss) / (1 << 20)
	}
	return res
}

// Open starts system name's worker process, watches its acks and runs a
// few unmeasured runs through it.
func (b *Bench) Open(ctx context.Context, name string) (_ *Meter, err error) {
	i := slices.IndexFunc(b.systems, func(s *system) bool { return s.name == name })
	if i < 0 {
		return nil, fmt.Errorf("no system %q in this bench (have %v)", name, b.Systems())
	}
	sys := b.systems[i]
	m := &Meter{b: b, sys: sys, phases: map[string]int{}}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if m.acks, err = watchAcks(b.watchNC, sys.stream, sys.consumer); err != nil {
		return nil, err
	}
	var profile string
	if b.cfg.ProfileDir != "" {
		profile = filepath.Join(b.cfg.ProfileDir, "worker-"+sys.name+".pprof")
	}
	var extra []string
	if b.cfg.FlowLimit > 0 && sys.mode == ModeDurable {
		extra = []string{"--flow-limit", strconv.Itoa(b.cfg.FlowLimit)}
	}
	args := workerArgs(sys.mode, b.srv.NATSURL, sys.redisURL, b.cfg.Concurrency, b.cfg.WorkerLogLevel, profile, extra...)
	if m.worker, err = startWorker(ctx, b.cfg.WorkerCommand, args, filepath.Join(b.dir, "worker-"+sys.name+".log")); err != nil {
		return nil, fmt.Errorf("%s: %w", sys.name, err)
	}
	if _, err := m.oneAtATime(ctx, "warmup", warmupRuns); err != nil {
		return nil, err
	}
	return m, nil
}

// Close stops the worker process (it drains first).
func (m *Meter) Close() {
	if m.worker != nil {
		m.worker.stop(workerGrace)
	}
	if m.acks != nil {
		m.acks.close()
	}
}

// WorkerPeakRSS is the worker process's peak resident set size so far.
func (m *Meter) WorkerPeakRSS() (int64, error) {
	_, rss, err := procStats(m.worker.pid())
	return rss, err
}

// oneAtATime runs n runs one after another and returns each run's time
// from its start to the ack of its last step.
func (m *Meter) oneAtATime(ctx context.Context, phase string, n int) ([]time.Duration, error) {
	return m.runsOneAtATime(ctx, phase, n, true)
}

// runsOneAtATime runs n runs one after another; with show it reports them
// as a phase of their own on the progress output.
func (m *Meter) runsOneAtATime(ctx context.Context, phase string, n int, show bool) ([]time.Duration, error) {
	label := m.sys.name + " " + phase
	ids := m.ids(phase, n)
	if show {
		m.b.progress.begin(label, n)
	}
	out := make([]time.Duration, 0, n)
	for i, id := range ids {
		reached := m.acks.expect(StepsPerRun)
		began := time.Now()
		if err := m.sys.start(ctx, id); err != nil {
			return nil, fmt.Errorf("%s: start %s: %w", label, id, err)
		}
		done, err := m.await(ctx, label, reached, StepsPerRun, nil, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, done.Sub(began))
		if show {
			m.b.progress.update(i + 1)
		}
	}
	if err := m.sys.verify(ctx, ids); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	if !show {
		return out, nil
	}
	if phase == "warmup" {
		m.b.progress.end("%d runs one at a time, not measured", n)
	} else {
		m.b.progress.end("%d runs one at a time: p50 %.3f ms/step, p99 %.3f ms/step",
			n, ms(Percentile(out, 0.5))/StepsPerRun, ms(Percentile(out, 0.99))/StepsPerRun)
	}
	return out, nil
}

// Throughput is what a throughput phase measured.
type Throughput struct {
	Runs, Steps int
	// Wall is from the first start to the last completion; Starts until
	// every start had returned.
	Wall, Starts time.Duration
	StepsPerS    float64
	// CPU used meanwhile by the worker process, redis-server, and this
	// process (the driver and the embedded nats-server).
	WorkerCPU, RedisCPU, BenchCPU time.Duration
	// Cost is what a step cost the servers.
	Cost *StepCost
}

// Throughput starts n runs at once (startConcurrency starts in flight)
// and measures the wall time from the first start to the last completion.
func (m *Meter) Throughput(ctx context.Context, n int) (Throughput, error) {
	label := m.sys.name + " throughput"
	ids := m.ids("tp", n)
	tp := Throughput{Runs: n, Steps: n * StepsPerRun}
	reached := m.acks.expect(tp.Steps)
	before := m.b.cpu(m.worker.pid())
	costBefore := m.b.costSample(ctx)
	m.b.progress.begin(label, tp.Steps)

	began := time.Now()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	var starts time.Duration // written before the send on started
	go func() {
		err := forEach(sctx, ids, startConcurrency, m.sys.start)
		starts = time.Since(began)
		started <- err
	}()
	done, err := m.await(ctx, label, reached, tp.Steps, started, m.b.progress.update)
	if err != nil {
		return tp, err
	}
	after := m.b.cpu(m.worker.pid())
	cost := m.b.costSample(ctx).perStep(costBefore, tp.Steps)
	tp.Cost = &cost
	tp.Wall = done.Sub(began)
	tp.StepsPerS = float64(tp.Steps) / tp.Wall.Seconds()
	tp.WorkerCPU = after.worker - before.worker
	tp.RedisCPU = after.redis - before.redis
	tp.BenchCPU = after.self - before.self
	// The starts returned before the last completion: every run had to
	// start first. Wait for the goroutine to read Starts without a race.
	if err := <-started; err != nil {
		return tp, fmt.Errorf("%s: start runs: %w", label, err)
	}
	tp.Starts = starts
	if err := m.sys.verify(ctx, ids); err != nil {
		return tp, fmt.Errorf("%s: %w", label, err)
	}
	m.b.progress.end("%d runs at once: %.0f steps/s (%d steps in %.2fs; all started after %.2fs)",
		n, tp.StepsPerS, tp.Steps, tp.Wall.Seconds(), tp.Starts.Seconds())
	return tp, nil
}

// ids names n new runs of a phase; a phase run again gets new ids.
func (m *Meter) ids(phase string, n int) []string {
	from := m.phases[phase]
	m.phases[phase] = from + n
	ids := make([]string, n)
	for i := range ids {
		ids[i] = runID(m.sys.name+"-"+phase, from+i)
	}
	return ids
}

// await waits until reached fires, failing when the worker exits, a start
// fails or no step finishes for stallTimeout. update, when set, sees the
// acks counted so far.
func (m *Meter) await(ctx context.Context, label string, reached <-chan time.Time, total int, started chan error, update func(int)) (time.Time, error) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := -1, time.Now()
	for {
		select {
		case t := <-reached:
			if update != nil {
				update(total)
			}
			return t, nil
		case err := <-started:
			if err != nil {
				return time.Time{}, fmt.Errorf("%s: start runs: %w", label, err)
			}
			started <- nil // for the caller, after the last completion
			started = nil
		case <-m.worker.exitc:
			return time.Time{}, fmt.Errorf("%s: the worker process exited (%v): %s", label, m.worker.err, m.worker.logTail())
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-tick.C:
			n := m.acks.counted()
			if update != nil {
				update(n)
			}
			if n != last {
				last, lastChange = n, time.Now()
			} else if time.Since(lastChange) > stallTimeout {
				return time.Time{}, fmt.Errorf("%s: no step finished for %s (%d of %d): %s", label, stallTimeout, n, total, m.worker.logTail())
			}
		}
	}
}

// cpuSample is the CPU time used so far by the processes a bench watches.
type cpuSample struct{ worker, redis, self time.Duration }

// CPUSeconds is the CPU time, in seconds, the bench's processes used over
// a span: the worker process, redis-server, and the bench process (its
// driver and the embedded nats-server).
type CPUSeconds struct {
	Worker float64 `json:"worker"`
	Redis  float64 `json:"redis_server"`
	Bench  float64 `json:"bench_process"`
}

func (s cpuSample) since(before cpuSample) CPUSeconds {
	return CPUSeconds{
		Worker: (s.worker - before.worker).Seconds(),
		Redis:  (s.redis - before.redis).Seconds(),
		Bench:  (s.self - before.self).Seconds(),
	}
}

// cpu samples the worker's (none when workerPID is 0), redis-server's and
// this process's CPU time; what can't be read counts as zero.
func (b *Bench) cpu(workerPID int) cpuSample {
	var s cpuSample
	if workerPID > 0 {
		s.worker, _, _ = procStats(workerPID)
	}
	if pid := b.srv.RedisPID(); pid > 0 {
		s.redis, _, _ = procStats(pid)
	}
	s.self, _, _ = procStats(os.Getpid())
	return s
}

// Percentile is the nearest-rank q-quantile of d.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var errNoSystems = errors.New("nothing to measure: give a store or drop --skip-floor")
