package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

// Stores durable can be measured on.
const (
	StoreRedis = "redis"
	StoreKV    = "kv"
)

// Config of a bench. Zero values take the defaults documented.
type Config struct {
	// Stores to measure durable on, in order: StoreRedis, StoreKV.
	// Default both.
	Stores []string
	// Runs is W, the runs started at once for throughput. Default 2000.
	Runs int
	// LatencyRuns is R, the runs run one at a time for latency. Default
	// 50; negative skips the latency phase.
	LatencyRuns int
	// Concurrency is the worker's steps in flight. Default 128.
	Concurrency int
	// FlowLimit > 0 runs durable's workers with a flow store and a
	// concurrency limit of FlowLimit on the resource every claims-9 step
	// uses (FlowResource): above Concurrency it does not bind, and
	// measures what flow control costs when it does not limit.
	FlowLimit int
	// SkipFloor leaves out the floors, bare pipelines (and the ratios).
	SkipFloor bool
	// Parked is N, the runs the waiting-at-scale phase parks at an
	// approval on the Redis store, after the other phases. Default
	// 100,000; negative skips the phase, as does a bench without the
	// Redis store.
	Parked int
	// SweepSchedulers is how many scheduler replicas sweep the parked
	// runs' expired waits. Default 1 (the figure the bound applies to).
	SweepSchedulers int
	// ParkedOnly runs the waiting-at-scale phase alone (on the Redis
	// store; Stores, SkipFloor, Runs and LatencyRuns do not apply).
	ParkedOnly bool
	// Durability is DurabilityDefault (the default) or DurabilityStrict:
	// Redis appendfsync always and JetStream sync on every write, for the
	// floor and durable alike.
	Durability string
	// FanOutOnly runs the fan-out phase alone, on each of Stores (one
	// 1,000-branch run against one 1,000-step run); without it the phase
	// runs after the claims-9 phases.
	FanOutOnly bool
	// History is N, the ended runs the history phase fills each of
	// Stores with (beside HistoryWaitingRuns waiting and
	// HistoryRunningRuns running); set, the phase runs alone (SkipFloor,
	// Runs, LatencyRuns, Parked and FanOutOnly do not apply). 0 leaves it
	// out.
	History int
	// HistoryRounds and HistoryWaiting shrink the history phase for a
	// test: rounds per measure (default 31) and waiting runs (default
	// HistoryWaitingRuns). Figures from a shrunk phase are not the
	// issue's.
	HistoryRounds, HistoryWaiting int
	// HistoryPurgeRate is the pace of the history phase's paced purge,
	// whose effect on the live work it measures. Default
	// scheduler.DefaultPurgeRate.
	HistoryPurgeRate int
	// Dir holds the servers' data and the worker logs. Default: a new
	// temporary directory, removed at the end.
	Dir string
	// WorkerCommand returns the command of a worker process with args
	// (the flags of RunWorker). Default: this executable with
	// `bench-worker` before args.
	WorkerCommand func(args []string) *exec.Cmd
	// WorkerLogLevel of the worker processes. Default DURABLE_LOG_LEVEL,
	// or info (what a deployed worker runs at).
	WorkerLogLevel string
	// ProfileDir, when set, receives a CPU profile of each worker process
	// (worker-<system>.pprof, from ready to exit). It must exist.
	ProfileDir string
	// Progress receives progress: a bar when it is a terminal, a line per
	// phase otherwise. Nil prints nothing.
	Progress io.Writer
}

func (c *Config) settle() error {
	if len(c.Stores) == 0 {
		c.Stores = []string{StoreRedis, StoreKV}
	}
	for _, s := range c.Stores {
		if s != StoreRedis && s != StoreKV {
			return fmt.Errorf("store %q: want %s or %s", s, StoreRedis, StoreKV)
		}
	}
	if c.Runs == 0 {
		c.Runs = 2000
	}
	if c.LatencyRuns == 0 {
		c.LatencyRuns = 50
	}
	c.LatencyRuns = max(c.LatencyRuns, 0)
	if c.Concurrency == 0 {
		c.Concurrency = 128
	}
	if c.Parked == 0 {
		c.Parked = 100000
	}
	c.Parked = max(c.Parked, 0)
	if c.SweepSchedulers == 0 {
		c.SweepSchedulers = 1
	}
	if c.SweepSchedulers < 1 {
		return fmt.Errorf("sweep schedulers %d: want at least 1", c.SweepSchedulers)
	}
	switch c.Durability {
	case "":
		c.Durability = DurabilityDefault
	case DurabilityDefault, DurabilityStrict:
	default:
		return fmt.Errorf("durability %q: want %s or %s", c.Durability, DurabilityDefault, DurabilityStrict)
	}
	if c.ParkedOnly && c.FanOutOnly {
		return errors.New("one phase alone at a time: parked or fanout")
	}
	if c.History < 0 {
		return fmt.Errorf("history %d: give a number of ended runs, or 0 to leave the phase out", c.History)
	}
	if c.History > 0 {
		if c.ParkedOnly || c.FanOutOnly {
			return errors.New("the history phase runs alone: not with the parked or fanout phase")
		}
		c.SkipFloor, c.Parked = true, 0
	}
	if c.FanOutOnly {
		c.SkipFloor, c.Parked = true, 0
	}
	if c.ParkedOnly {
		if c.Parked == 0 {
			return errors.New("only the waiting-at-scale phase, with no runs to park: give Parked at least 1")
		}
		if !slices.Contains(c.Stores, StoreRedis) {
			return errors.New("the waiting-at-scale phase runs on the Redis store: include it")
		}
		c.Stores, c.SkipFloor = []string{StoreRedis}, true
	}
	if c.Runs < 1 || c.Concurrency < 1 {
		return fmt.Errorf("runs %d and concurrency %d: want at least 1", c.Runs, c.Concurrency)
	}
	if c.WorkerLogLevel == "" {
		c.WorkerLogLevel = os.Getenv("DURABLE_LOG_LEVEL")
	}
	if c.WorkerLogLevel == "" {
		c.WorkerLogLevel = "info"
	}
	if c.WorkerCommand == nil {
		cmd, err := ownWorker()
		if err != nil {
			return err
		}
		c.WorkerCommand = cmd
	}
	return nil
}

// Bench is a bench's servers and driver, ready to measure systems: Run
// uses it, and so do the Go benchmarks. Close stops everything.
type Bench struct {
	cfg     Config
	dir     string
	rmDir   bool
	srv     *Servers
	nc      *nats.Conn // the driver's: starts runs, verifies them
	js      jetstream.JetStream
	watchNC *nats.Conn // the ack watchers'
	rdb     *redis.Client
	// twin holds the servers of the history phase's twin store, started
	// by its first use.
	twin     *benchTwin
	systems  []*system
	progress *progress
	report   Report
}

// Start starts the servers and connects the driver to them.
func Start(ctx context.Context, cfg Config) (_ *Bench, err error) {
	if err := cfg.settle(); err != nil {
		return nil, err
	}
	b := &Bench{cfg: cfg, dir: cfg.Dir, progress: newProgress(cfg.Progress)}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "durable-bench-"); err != nil {
			return nil, err
		}
		b.rmDir = true
	}
	withRedis := !cfg.SkipFloor || slices.Contains(cfg.Stores, StoreRedis)
	if b.srv, err = StartServers(ctx, b.dir, withRedis, cfg.Durability == DurabilityStrict); err != nil {
		return nil, err
	}
	b.report = Report{
		Workload: "claims-9", StateBytes: stateBytes(), Runs: cfg.Runs, LatencyRuns: cfg.LatencyRuns,
		Concurrency: cfg.Concurrency, FlowLimit: cfg.FlowLimit, CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		NATSServer: server.VERSION, RedisServer: b.srv.RedisVersion, WorkerLogLevel: cfg.WorkerLogLevel,
		Durability: cfg.Durability,
	}
	durRedis, durKV := durabilities(cfg.Durability)
	if b.nc, err = nats.Connect(b.srv.NATSURL, nats.Name("durable-bench")); err != nil {
		return nil, err
	}
	if b.watchNC, err = nats.Connect(b.srv.NATSURL, nats.Name("durable-bench-acks")); err != nil {
		return nil, err
	}
	js, err := jetstream.New(b.nc)
	if err != nil {
		return nil, err
	}
	b.js = js
	if b.srv.RedisURL != "" {
		opt, err := redis.ParseURL(b.srv.RedisURL)
		if err != nil {
			return nil, err
		}
		b.rdb = redis.NewClient(opt)
	}
	if !cfg.SkipFloor {
		for _, kind := range []floorKind{syncFloor, pipelinedFloor} {
			b.systems = append(b.systems, floorSystem(kind, js, b.rdb, b.srv.RedisURL, durRedis))
		}
	}
	for _, st := range cfg.Stores {
		switch st {
		case StoreRedis:
			cl := client.New(js, redisstore.New(b.rdb, redisstore.Options{}))
			b.systems = append(b.systems, durableSystem(SystemDurableRedis, durRedis, b.srv.RedisURL, cl))
		case StoreKV:
			kv, err := kvstore.New(ctx, js, kvstore.Options{})
			if err != nil {
				return nil, fmt.Errorf("open JetStream KV store: %w", err)
			}
			b.systems = append(b.systems, durableSystem(SystemDurableKV, durKV, "", client.New(js, kv)))
		}
	}
	if len(b.systems) == 0 {
		return nil, errNoSystems
	}
	return b, nil
}

// Systems names the systems this bench measures, in order.
func (b *Bench) Systems() []string {
	var out []string
	for _, s := range b.systems {
		out = append(out, s.name)
	}
	return out
}

// Close disconnects and stops the servers, and removes the temporary
// directory it made.
func (b *Bench) Close() {
	b.twin.close()
	if b.rdb != nil {
		_ = b.rdb.Close()
	}
	if b.watchNC != nil {
		b.watchNC.Close()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.srv != nil {
		b.srv.Close()
	}
	if b.rmDir {
		_ = os.RemoveAll(b.dir)
	}
}

// Run starts the servers, measures the floor and durable on each store
// in turn, stops everything (also when ctx ends) and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	began := time.Now()
	b, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	rep := b.report
	rep.Started = began.UTC()
	if b.cfg.History > 0 {
		waiting := HistoryWaitingRuns
		if b.cfg.HistoryWaiting > 0 {
			waiting = b.cfg.HistoryWaiting
		}
		b.progress.linef("durable bench: history, %d ended runs beside %d waiting and %d running, on %s",
			b.cfg.History, waiting, HistoryRunningRuns, strings.Join(b.Systems(), ", "))
		if rep.History, err = b.History(ctx, b.cfg.History); err != nil {
			return nil, err
		}
		rep.WallSeconds = time.Since(began).Seconds()
		return &rep, nil
	}
	switch {
	case cfg.ParkedOnly:
		b.progress.linef("durable bench: waiting at scale only, %d runs parked on %s", b.cfg.Parked, SystemDurableRedis)
	case cfg.FanOutOnly:
		b.progress.linef("durable bench: fan-out only, %d branches against %d steps in line on %s", FanOutBranches, FanOutBranches, strings.Join(b.Systems(), ", "))
	default:
		b.progress.linef("durable bench: %s on %s; %s", rep.Workload, strings.Join(b.Systems(), ", "), rep.describe())
	}
	if !cfg.ParkedOnly && !cfg.FanOutOnly {
		results, err := b.measureAll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bench interrupted: %w", ctx.Err())
			}
			return nil, err
		}
		rep.Results = results
	}
	rep.ratios()
	if !cfg.ParkedOnly {
		if rep.FanOut, err = b.FanOut(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bench interrupted during the fan-out phase: %w", ctx.Err())
			}
			return nil, err
		}
	}
	// Last, so that the claims-9 phases run on servers without 100,000
	// runs and their messages.
	if b.cfg.Parked > 0 && !slices.Contains(b.cfg.Stores, StoreRedis) {
		b.progress.linef("waiting at scale: skipped, it runs on the Redis store")
	}
	if b.cfg.Parked > 0 && slices.Contains(b.cfg.Stores, StoreRedis) {
		if rep.Parked, err = b.Parked(ctx, b.cfg.Parked); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bench interrupted during the waiting-at-scale phase: %w", ctx.Err())
			}
			return nil, err
		}
	}
	rep.WallSeconds = time.Since(began).Seconds()
	return &rep, nil
}
