package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/scheduler"
)

// The waiting-at-scale phase parks N bench-park runs at an approval on
// the Redis store, through one worker process, and measures what they
// cost: the worker's RSS and goroutines (parked runs must hold none of
// either), Redis memory per parked run, and the time a scheduler, started
// once every approval's TTL has passed, takes to expire them all.

// Acceptance bounds of issue 5, printed next to each figure.
const (
	// ParkedRSSBoundPct: the worker's RSS with N runs parked, within this
	// many percent of its RSS idle.
	ParkedRSSBoundPct = 10
	// ParkedGoroutineSlack: goroutines must not grow; this many more than
	// idle are the client libraries' own coming and going.
	ParkedGoroutineSlack = 2
	// ParkedRedisBytesBound: Redis memory per parked run.
	ParkedRedisBytesBound = 2048
	// ParkedSweepBound: a scheduler expires every parked run within this.
	ParkedSweepBound = 20 * time.Second
)

const (
	// parkTTL of the measured runs' approvals: short, so the sweep can
	// start soon after the last park; nothing expires before it, as no
	// scheduler runs until then.
	parkTTL = time.Second
	// parkWarmupRuns park before the idle figures are taken, started as
	// the measured runs are, with a TTL that outlasts the bench: the
	// worker's connection pools, buffers and goroutines are at their
	// working size for its concurrency (what a worker that has run for a
	// while holds), and these runs stay out of the sweep. Were parked runs
	// to hold memory, N of them would hold N/parkWarmupRuns times more.
	parkWarmupRuns = 5000
	parkWarmupTTL  = time.Hour
	// parkStartConcurrency bounds the starts in flight.
	parkStartConcurrency = 64
	// parkQuiet lets the worker finish logging and the runtime settle
	// before its stats are read.
	parkQuiet = 500 * time.Millisecond
	// schedulerDefaultBatch is scheduler.Config.Batch's documented
	// default, which `durable scheduler` runs with.
	schedulerDefaultBatch = 256
)

// ParkedResult is what the waiting-at-scale phase measured.
type ParkedResult struct {
	System     string  `json:"system"`
	Runs       int     `json:"runs"`
	TTLSeconds float64 `json:"approval_ttl_s"`
	// Starts: N client.Start calls, parkStartConcurrency at once.
	StartConcurrency int     `json:"start_concurrency"`
	StartSeconds     float64 `json:"starts_s"`
	StartsPerS       float64 `json:"starts_per_s"`
	// Parks: from the first start to the worker's ack of the last park.
	ParkSeconds float64 `json:"park_s"`
	ParksPerS   float64 `json:"parks_per_s"`
	// CPU seconds used while the N runs started and parked: the worker
	// process, redis-server, and this process (the driver's starts and
	// the embedded nats-server); and this process during the sweep (the
	// scheduler and nats-server), and redis-server.
	ParkCPU  CPUSeconds `json:"park_cpu_s"`
	SweepCPU CPUSeconds `json:"sweep_cpu_s"`
	// PerWait is what one expired wait cost the servers during the sweep
	// (the scheduler's reads and writes, the messages it published, and
	// its claims of the deadline index).
	PerWait *StepCost `json:"sweep_per_wait,omitempty"`
	// The worker process cold (after setup), idle (after a warm-up of
	// parkWarmupRuns parked runs) and with the N runs parked more: RSS
	// as it is, then after a GC that returns freed memory to the OS (the
	// figures the bound applies to: idle against parked); goroutines and
	// in-use heap after the GC; peak RSS over the phase.
	WorkerRSSColdMiB       float64 `json:"worker_rss_cold_mib"` // after setup, before any run
	WorkerRSSIdleMiB       float64 `json:"worker_rss_idle_mib"`
	WorkerRSSParkedMiB     float64 `json:"worker_rss_parked_mib"`
	WorkerRSSParkedNoGCMiB float64 `json:"worker_rss_parked_before_gc_mib"`
	WorkerAnonIdleMiB      float64 `json:"worker_rss_anon_idle_mib"` // RssAnon: RSS without the executable's pages
	WorkerAnonParkedMiB    float64 `json:"worker_rss_anon_parked_mib"`
	WorkerRSSGrowthPct     float64 `json:"worker_rss_growth_pct"`
	WorkerPeakRSSMiB       float64 `json:"worker_peak_rss_mib"`
	WorkerGoroutinesIdle   int     `json:"worker_goroutines_idle"`
	WorkerGoroutinesParked int     `json:"worker_goroutines_parked"`
	WorkerHeapIdleMiB      float64 `json:"worker_heap_inuse_idle_mib"`
	WorkerHeapParkedMiB    float64 `json:"worker_heap_inuse_parked_mib"`
	// WorkerHeapBytesPerRun is the in-use heap's growth from idle to
	// parked, per parked run: what a parked run would hold in the worker.
	WorkerHeapBytesPerRun     float64 `json:"worker_heap_bytes_per_parked_run"`
	WorkerParked              int64   `json:"worker_parked"` // the worker's own count, warm-up included
	RedisUsedMemoryDeltaBytes int64   `json:"redis_used_memory_delta_bytes"`
	RedisBytesPerRun          float64 `json:"redis_bytes_per_parked_run"`
	// RedisRunKeyBytes is the mean MEMORY USAGE of a sample of parked
	// runs' records (the rest is their entries in the run and deadline
	// indexes and Redis's own bookkeeping).
	RedisRunKeyBytes float64 `json:"redis_run_key_bytes_sampled"`
	// The sweep: a scheduler as `durable scheduler` runs it (default
	// interval, batch and lease, logging at the worker's level to a file),
	// or SweepSchedulers replicas of it, starts once every TTL has passed;
	// from its start until it expired all N. FirstExpirySeconds is when
	// the first one was.
	SweepSchedulers    int     `json:"sweep_schedulers"`
	SweepInterval      float64 `json:"sweep_interval_s"`
	SweepBatch         int     `json:"sweep_batch"`
	SweepSeconds       float64 `json:"sweep_s"`
	FirstExpirySeconds float64 `json:"sweep_first_expiry_s"`
	ExpiredPerS        float64 `json:"sweep_expired_per_s"`
	SweepErrors        int64   `json:"sweep_errors"`
	// VerifiedExpired runs were found in the store after the sweep no
	// longer waiting, each with the scheduler's expiry recorded (which it
	// records only for a run waiting past its deadline).
	VerifiedExpired int `json:"verified_expired"`
	// PhaseSeconds is the whole phase, worker start to verification.
	PhaseSeconds float64 `json:"phase_s"`
	// Bounds met.
	RSSOK        bool `json:"worker_rss_ok"`
	GoroutinesOK bool `json:"worker_goroutines_ok"`
	RedisOK      bool `json:"redis_bytes_ok"`
	SweepOK      bool `json:"sweep_ok"`
}

// Parked runs the waiting-at-scale phase with n runs on the Redis store.
func (b *Bench) Parked(ctx context.Context, n int) (*ParkedResult, error) {
	if b.rdb == nil {
		return nil, errors.New("the waiting-at-scale phase needs the Redis store")
	}
	began := time.Now()
	p := &parkedPhase{
		b:     b,
		cl:    client.New(b.js, redisstore.New(b.rdb, redisstore.Options{})),
		label: SystemDurableRedis + " parked",
		res:   &ParkedResult{System: SystemDurableRedis, Runs: n, TTLSeconds: parkTTL.Seconds(), StartConcurrency: parkStartConcurrency},
	}
	res, label := p.res, p.label

	acks, err := watchAcks(b.watchNC, queue.StepStream, queue.ConsumerName(ParkWorkflow))
	if err != nil {
		return nil, err
	}
	defer acks.close()
	// No CPU profile of this worker even with ProfileDir: the profile's
	// buffers would grow the RSS measured.
	args := workerArgs(ModeDurable, b.srv.NATSURL, b.srv.RedisURL, b.cfg.Concurrency, b.cfg.WorkerLogLevel, "",
		"--workload", WorkloadPark, "--stats")
	wp, err := startWorker(ctx, b.cfg.WorkerCommand, args, filepath.Join(b.dir, "worker-"+SystemDurableRedis+"-parked.log"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	defer wp.stop(workerGrace)
	p.wp, p.acks, p.m = wp, acks, &Meter{b: b, worker: wp, acks: acks}

	idle, err := p.warmUp(ctx)
	if err != nil {
		return nil, err
	}
	runIDs := parkIDs("parked", n)
	lastPark, err := p.park(ctx, runIDs)
	if err != nil {
		return nil, err
	}
	if err := p.measureParked(ctx, runIDs, idle); err != nil {
		return nil, err
	}
	// The parked runs hold nothing in the worker: stop it, so that the
	// sweep is the scheduler's alone. The rejected runs' resume messages
	// wait in the stream.
	wp.stop(workerGrace)

	// Sweep, once the last approval's TTL has passed (its deadline is at
	// most the ack of its park plus the TTL).
	if err := sleep(ctx, time.Until(lastPark.Add(parkTTL+50*time.Millisecond))); err != nil {
		return nil, err
	}
	if err := b.sweep(ctx, label, p.cl, n, res); err != nil {
		return nil, err
	}
	if res.VerifiedExpired, err = verifyExpired(ctx, p.cl.Store(), runIDs); err != nil {
		return nil, fmt.Errorf("%s: %w", label, err)
	}
	res.PhaseSeconds = time.Since(began).Seconds()
	res.RSSOK = res.WorkerRSSGrowthPct <= ParkedRSSBoundPct
	res.GoroutinesOK = res.WorkerGoroutinesParked <= res.WorkerGoroutinesIdle+ParkedGoroutineSlack
	res.RedisOK = res.RedisBytesPerRun <= ParkedRedisBytesBound
	res.SweepOK = res.SweepSeconds < ParkedSweepBound.Seconds()
	b.progress.linef("%-36s %d runs parked and expired in %.1fs", label, n, res.PhaseSeconds)
	return res, nil
}

// parkedPhase is the waiting-at-scale phase under way: its worker process,
// the acks it watches and the figures so far.
type parkedPhase struct {
	b     *Bench
	cl    *client.Client
	wp    *workerProc
	acks  *ackWatcher
	m     *Meter
	label string
	res   *ParkedResult
}

// parkedFigures are the worker's stats and RSS and Redis's used memory at
// one moment of the phase.
type parkedFigures struct {
	worker    workerStats
	rss       rssSample
	redisUsed int64
}

// starter starts bench-park runs whose approvals have ttl.
func (p *parkedPhase) starter(ttl time.Duration) func(ctx context.Context, id string) error {
	return func(ctx context.Context, id string) error {
		_, created, err := p.cl.Start(ctx, client.StartRequest{Workflow: ParkWorkflow, RunID: id, Input: ParkInput(id, ttl), By: "bench"})
		if err == nil && !created {
			err = fmt.Errorf("run %s existed already", id)
		}
		return err
	}
}

// warmUp takes the cold figures, parks parkWarmupRuns runs, and returns
// the idle figures.
func (p *parkedPhase) warmUp(ctx context.Context) (parkedFigures, error) {
	var idle parkedFigures
	_, coldRSS, err := p.wp.stats(ctx, true)
	if err != nil {
		return idle, fmt.Errorf("%s: %w", p.label, err)
	}
	p.res.WorkerRSSColdMiB = mib(coldRSS.RSS)
	// Warm up, then the idle figures.
	p.b.progress.begin(p.label+" warmup", parkWarmupRuns)
	reached := p.acks.expect(parkWarmupRuns)
	if err := forEach(ctx, parkIDs("parked-warmup", parkWarmupRuns), parkStartConcurrency, p.starter(parkWarmupTTL)); err != nil {
		return idle, fmt.Errorf("%s: start warm-up runs: %w", p.label, err)
	}
	if _, err := p.m.await(ctx, p.label, reached, parkWarmupRuns, nil, nil); err != nil {
		return idle, err
	}
	p.b.progress.end("%d runs parked at once, not measured", parkWarmupRuns)
	if err := sleep(ctx, parkQuiet); err != nil {
		return idle, err
	}
	if idle.worker, idle.rss, err = p.wp.stats(ctx, true); err != nil {
		return idle, fmt.Errorf("%s: %w", p.label, err)
	}
	idle.redisUsed, err = p.b.redisUsedMemory(ctx)
	return idle, err
}

// park starts the runs of ids and returns when the worker acked the park
// of the last one.
func (p *parkedPhase) park(ctx context.Context, ids []string) (lastPark time.Time, err error) {
	n, res := len(ids), p.res
	// Park N runs: every start returned, and every park acked.
	p.b.progress.begin(p.label+" starts", n)
	reached := p.acks.expect(n)
	cpuBefore := p.b.cpu(p.wp.pid())
	startsBegan := time.Now()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan error, 1)
	var starts time.Duration // written before the send on started
	go func() {
		err := forEach(sctx, ids, parkStartConcurrency, p.starter(parkTTL))
		starts = time.Since(startsBegan)
		started <- err
	}()
	lastPark, err = p.m.await(ctx, p.label, reached, n, started, p.b.progress.update)
	if err != nil {
		return lastPark, err
	}
	res.ParkCPU = p.b.cpu(p.wp.pid()).since(cpuBefore)
	if err := <-started; err != nil {
		return lastPark, fmt.Errorf("%s: start runs: %w", p.label, err)
	}
	res.StartSeconds = starts.Seconds()
	res.StartsPerS = float64(n) / starts.Seconds()
	res.ParkSeconds = lastPark.Sub(startsBegan).Seconds()
	res.ParksPerS = float64(n) / res.ParkSeconds
	p.b.progress.end("%d runs started in %.1fs (%.0f/s), all parked after %.1fs (%.0f/s)",
		n, res.StartSeconds, res.StartsPerS, res.ParkSeconds, res.ParksPerS)
	return lastPark, nil
}

// measureParked takes the figures with the runs of ids parked, against
// the idle ones.
func (p *parkedPhase) measureParked(ctx context.Context, ids []string, idle parkedFigures) error {
	n, res := len(ids), p.res
	if err := sleep(ctx, parkQuiet); err != nil {
		return err
	}
	memAfter, err := p.b.redisUsedMemory(ctx)
	if err != nil {
		return err
	}
	_, noGCRSS, err := p.wp.stats(ctx, false)
	if err != nil {
		return fmt.Errorf("%s: %w", p.label, err)
	}
	parked, parkedRSS, err := p.wp.stats(ctx, true)
	if err != nil {
		return fmt.Errorf("%s: %w", p.label, err)
	}
	if _, peak, err := procStats(p.wp.pid()); err == nil {
		res.WorkerPeakRSSMiB = mib(peak)
	}
	res.WorkerRSSIdleMiB, res.WorkerRSSParkedMiB, res.WorkerRSSParkedNoGCMiB = mib(idle.rss.RSS), mib(parkedRSS.RSS), mib(noGCRSS.RSS)
	if idle.rss.RSS > 0 {
		res.WorkerRSSGrowthPct = 100 * float64(parkedRSS.RSS-idle.rss.RSS) / float64(idle.rss.RSS)
	}
	res.WorkerAnonIdleMiB, res.WorkerAnonParkedMiB = mib(idle.rss.Anon), mib(parkedRSS.Anon)
	res.WorkerHeapBytesPerRun = float64(parked.HeapInuse-idle.worker.HeapInuse) / float64(n)
	res.WorkerGoroutinesIdle, res.WorkerGoroutinesParked = idle.worker.Goroutines, parked.Goroutines
	res.WorkerHeapIdleMiB, res.WorkerHeapParkedMiB = mib(idle.worker.HeapInuse), mib(parked.HeapInuse)
	res.WorkerParked = parked.Parked
	res.RedisUsedMemoryDeltaBytes = memAfter - idle.redisUsed
	res.RedisBytesPerRun = float64(res.RedisUsedMemoryDeltaBytes) / float64(n)
	if res.RedisRunKeyBytes, err = p.b.sampleRunKeys(ctx, ids); err != nil {
		return err
	}
	if want := int64(parkWarmupRuns + n); parked.Parked != want {
		return fmt.Errorf("%s: the worker parked %d runs, want %d", p.label, parked.Parked, want)
	}
	return nil
}

// sweep runs a scheduler until it expired n runs, and stops it.
func (b *Bench) sweep(ctx context.Context, label string, cl *client.Client, n int, res *ParkedResult) error {
	logf, err := os.Create(filepath.Join(b.dir, "scheduler-parked.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	schs, cfg, err := b.sweepSchedulers(cl, logf)
	if err != nil {
		return err
	}
	res.SweepSchedulers, res.SweepInterval, res.SweepBatch = len(schs), cfg.Interval.Seconds(), schedulerDefaultBatch
	if b.cfg.ProfileDir != "" {
		f, err := os.Create(filepath.Join(b.cfg.ProfileDir, "sweep-"+SystemDurableRedis+".pprof"))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return b.runSweep(ctx, &sweepRun{label: label, n: n, schs: schs, interval: cfg.Interval, log: logf.Name()}, res)
}

// sweepSchedulers are b.cfg.SweepSchedulers schedulers configured as
// `durable scheduler` with its default flags, logging to logf.
func (b *Bench) sweepSchedulers(cl *client.Client, logf *os.File) ([]*scheduler.Scheduler, scheduler.Config, error) {
	lvl, err := zerolog.ParseLevel(b.cfg.WorkerLogLevel)
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	log := zerolog.New(logf).Level(lvl).With().Timestamp().Str("component", "scheduler").Logger()
	// The configuration of `durable scheduler` with its default flags.
	cfg := scheduler.Config{Client: cl, Interval: time.Second, Lease: 30 * time.Second, Logger: &log}
	schs := make([]*scheduler.Scheduler, b.cfg.SweepSchedulers)
	for i := range schs {
		if schs[i], err = scheduler.New(cfg); err != nil {
			return nil, cfg, err
		}
	}
	return schs, cfg, nil
}

// sweepRun is what runSweep runs and reports: the schedulers that expire
// the n parked runs.
type sweepRun struct {
	label    string
	n        int
	schs     []*scheduler.Scheduler
	interval time.Duration
	log      string // the schedulers' log file
}

// stats sums the counters of the schedulers.
func (s *sweepRun) stats() (st scheduler.Stats) {
	for _, sch := range s.schs {
		ss := sch.Stats()
		st.Rejected += ss.Rejected
		st.Errors += ss.Errors
	}
	return st
}

// runSweep runs the schedulers until they expired s.n runs, and stops them.
func (b *Bench) runSweep(ctx context.Context, s *sweepRun, res *ParkedResult) error {
	b.progress.begin(s.label+" sweep", s.n)
	sctx, cancel := context.WithCancel(ctx)
	cpuBefore, costBefore := b.cpu(0), b.costSample(ctx)
	began := time.Now()
	stopped := make(chan error, len(s.schs))
	for _, sch := range s.schs {
		go func() { stopped <- sch.Run(sctx) }()
	}
	defer func() {
		cancel()
		for range s.schs {
			<-stopped
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := int64(0), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-stopped:
			stopped <- err
			return fmt.Errorf("%s: the scheduler stopped: %v", s.label, err)
		case now := <-tick.C:
			st := s.stats()
			b.progress.update(int(st.Rejected))
			if st.Rejected > 0 && res.FirstExpirySeconds == 0 {
				res.FirstExpirySeconds = now.Sub(began).Seconds()
			}
			res.SweepErrors = st.Errors
			if st.Rejected >= int64(s.n) {
				res.SweepSeconds = now.Sub(began).Seconds()
				res.SweepCPU = b.cpu(0).since(cpuBefore)
				perWait := b.costSample(ctx).perStep(costBefore, s.n)
				res.PerWait = &perWait
				if d := res.SweepSeconds - res.FirstExpirySeconds; d > 0 {
					res.ExpiredPerS = float64(s.n) / d
				}
				b.progress.end("%d expired waits swept in %.1fs (first after %.1fs, then %.0f/s; %d scheduler(s), batch %d, interval %s)",
					s.n, res.SweepSeconds, res.FirstExpirySeconds, res.ExpiredPerS, len(s.schs), res.SweepBatch, s.interval)
				return nil
			}
			if st.Rejected != last {
				last, lastChange = st.Rejected, now
			} else if now.Sub(lastChange) > stallTimeout {
				return fmt.Errorf("%s: the scheduler expired nothing for %s (%d of %d, %d errors); log %s",
					s.label, stallTimeout, st.Rejected, s.n, st.Errors, s.log)
			}
		}
	}
}

// verifyExpired checks in the store that every run in ids no longer
// waits and has the scheduler's expiry recorded as its last decision. It
// returns how many it checked.
func verifyExpired(ctx context.Context, store checkpoint.Runs, ids []string) (int, error) {
	runs, err := store.ListRuns(ctx, checkpoint.Filter{Workflow: ParkWorkflow})
	if err != nil {
		return 0, fmt.Errorf("verify expired runs: %w", err)
	}
	byID := make(map[string]*checkpoint.Run, len(runs))
	for i := range runs {
		byID[runs[i].ID] = &runs[i]
	}
	for _, id := range ids {
		run := byID[id]
		if run == nil {
			return 0, fmt.Errorf("run %s is not in the store", id)
		}
		if run.Status == checkpoint.StatusWaiting {
			return 0, fmt.Errorf("run %s still waits after the sweep (deadline %s)", id, run.Wait.Deadline.Format(time.RFC3339Nano))
		}
		a := run.Approvals
		if len(a) == 0 || a[len(a)-1].Decision != checkpoint.DecisionRejected || a[len(a)-1].Channel != client.ChannelScheduler {
			return 0, fmt.Errorf("run %s is %s without the scheduler's expiry (approvals %+v)", id, run.Status, a)
		}
	}
	return len(ids), nil
}

// redisUsedMemory is INFO memory's used_memory.
func (b *Bench) redisUsedMemory(ctx context.Context) (int64, error) {
	info, err := b.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("redis INFO memory: no used_memory")
}

// sampleRunKeys is the mean MEMORY USAGE of up to 64 run records among ids
// (the key layout is the Redis store's, documented in docs/protocol.md).
func (b *Bench) sampleRunKeys(ctx context.Context, ids []string) (float64, error) {
	const samples = 64
	step := max(1, len(ids)/samples)
	var total, count int64
	for i := 0; i < len(ids); i += step {
		n, err := b.rdb.MemoryUsage(ctx, "durable:{"+ids[i]+"}:run", 0).Result()
		if err != nil {
			return 0, fmt.Errorf("redis MEMORY USAGE of run %s: %w", ids[i], err)
		}
		total += n
		count++
	}
	if count == 0 {
		return 0, nil
	}
	return float64(total) / float64(count), nil
}

// parkIDs names n runs of a phase of the waiting-at-scale phase.
func parkIDs(phase string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = runID(SystemDurableRedis+"-"+phase, i)
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// writeText prints the phase's figures, each with its bound and verdict.
func (p *ParkedResult) writeText(b *strings.Builder) error {
	fmt.Fprintf(b, "waiting at scale: %d %s runs parked at an approval on %s (TTL %s, rejected on expiry), one worker process; phase %.1fs\n\n",
		p.Runs, ParkWorkflow, p.System, time.Duration(p.TTLSeconds*float64(time.Second)), p.PhaseSeconds)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmeasured\tbound\t\t")
	fmt.Fprintf(tw, "worker RSS, idle -> %d parked\t%.1f -> %.1f MiB (%+.1f%%)\twithin %d%% of idle\t%s\t\n",
		p.Runs, p.WorkerRSSIdleMiB, p.WorkerRSSParkedMiB, p.WorkerRSSGrowthPct, ParkedRSSBoundPct, verdict(p.RSSOK))
	fmt.Fprintf(tw, "worker goroutines, idle -> parked\t%d -> %d\tmust not grow (+%d noise)\t%s\t\n",
		p.WorkerGoroutinesIdle, p.WorkerGoroutinesParked, ParkedGoroutineSlack, verdict(p.GoroutinesOK))
	fmt.Fprintf(tw, "Redis memory per parked run\t%.0f B (run record %.0f B)\t<= %d B\t%s\t\n",
		p.RedisBytesPerRun, p.RedisRunKeyBytes, ParkedRedisBytesBound, verdict(p.RedisOK))
	fmt.Fprintf(tw, "sweep of %d expired waits\t%.1f s (first expiry after %.1f s, then %.0f/s)\t< %s\t%s\t\n",
		p.Runs, p.SweepSeconds, p.FirstExpirySeconds, p.ExpiredPerS, ParkedSweepBound, verdict(p.SweepOK))
	fmt.Fprintf(tw, "starts (%d at once, pkg/client)\t%.1f s, %.0f runs/s\t\t\t\n", p.StartConcurrency, p.StartSeconds, p.StartsPerS)
	fmt.Fprintf(tw, "all parked after\t%.1f s, %.0f runs/s\t\t\t\n", p.ParkSeconds, p.ParksPerS)
	fmt.Fprintf(tw, "CPU s while parking\tworker %.1f, redis-server %.1f, bench process %.1f\t\t\t\n", p.ParkCPU.Worker, p.ParkCPU.Redis, p.ParkCPU.Bench)
	fmt.Fprintf(tw, "CPU s while sweeping\tscheduler + nats-server %.1f, redis-server %.1f\t\t\t\n", p.SweepCPU.Bench, p.SweepCPU.Redis)
	if c := p.PerWait; c != nil {
		fmt.Fprintf(tw, "cost of one expired wait\tredis %.2f cmds (%s), %.0f B in; nats %.2f msgs in, %.0f B in\t\t\t\n",
			c.RedisCommands, byCommand(c.RedisByCommand), c.RedisNetInBytes, c.NATSInMsgs, c.NATSInBytes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(b, "\nworker idle: after setup (%.1f MiB) and %d runs parked as a warm-up; RSS and heap after a GC that returns freed memory\n"+
		"to the OS (the runtime does the same within 2 minutes of quiet); before it, parked RSS was %.1f MiB; peak RSS %.1f MiB;\n"+
		"RSS without the executable's pages (RssAnon) %.1f -> %.1f MiB; in-use heap %.1f -> %.1f MiB, %.1f bytes per parked run.\n"+
		"Redis: INFO used_memory grew %.1f MiB.\n"+
		"the sweep is %d `durable scheduler` with its defaults (batch %d, interval %gs), started once every TTL had passed, worker stopped;\n"+
		"timed from its start (a sweep at once, then one per tick; its repair passes start 30 s later) until it had expired all %d; %d errors.\n"+
		"verified: the worker parked all %d (and the warm-up), and in the store after the sweep %d no longer wait, each rejected by the scheduler.\n\n",
		p.WorkerRSSColdMiB, parkWarmupRuns, p.WorkerRSSParkedNoGCMiB, p.WorkerPeakRSSMiB,
		p.WorkerAnonIdleMiB, p.WorkerAnonParkedMiB, p.WorkerHeapIdleMiB, p.WorkerHeapParkedMiB, p.WorkerHeapBytesPerRun, mib(p.RedisUsedMemoryDeltaBytes),
		p.SweepSchedulers, p.SweepBatch, p.SweepInterval, p.Runs, p.SweepErrors, p.Runs, p.VerifiedExpired)
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
