package cli

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/durable-run/durable/internal/bench"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/service"
)

// cmdBench is `durable bench`: the claims-9 workload of WORKLOAD.md on
// durable (Redis and KV stores) and on the floor, on servers it starts on
// loopback and stops at the end (also on Ctrl-C).
func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable bench", stderr)
	store := fs.String("store", "all", "checkpoint store to measure durable on: redis, kv or all")
	runs := fs.Int("runs", 2000, "W: runs started at once for throughput")
	latencyRuns := fs.Int("latency-runs", 50, "R: runs one at a time for per-step latency")
	concurrency := fs.Int("concurrency", 128, "steps in flight in the one worker process")
	flowLimit := fs.Int("flow-limit", 0, "N: durable's workers take a slot of a concurrency limit of N for every step (above --concurrency it does not bind: what flow control costs when it does not limit); 0: no flow control")
	skipFloor := fs.Bool("skip-floor", false, "do not measure the floor (bare pipeline) nor print ratios to it")
	asJSON := fs.Bool("json", false, "print the report as JSON (progress goes to stderr)")
	profile := fs.String("profile", "", "write a CPU profile of each worker process to `dir` (worker-<system>.pprof), and of the parked runs' sweep (sweep-durable-redis.pprof)")
	parked := fs.Int("parked", 100000, "N: runs parked at an approval on the Redis store, then swept by a scheduler, after the other phases; 0 skips")
	durability := fs.String("durability", bench.DurabilityDefault, "default (Redis appendfsync everysec, JetStream's default sync), or strict (both sync every write), for the floor and durable alike")
	only := fs.String("only", "", "run one phase alone: parked, or fanout (1,000 branches against 1,000 steps in line)")
	sweepers := fs.Int("sweep-schedulers", 1, "scheduler replicas that sweep the parked runs' expired waits")
	purgeRate := fs.Int("purge-rate", scheduler.DefaultPurgeRate, "with --history: the pace (runs/s) of the purge during which the live work's figures are taken again")
	history := fs.Int("history", 0, "N: run the history phase alone: fill each store with N ended claims-9 runs beside 1,000 waiting and 100 running, and measure a repair pass, a page of runs, the fleet gauges, runs list --status waiting and start p50 against the same store without them; 0 leaves it out")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("bench: unexpected argument %q", pos[0])
	}
	if *durability != bench.DurabilityDefault && *durability != bench.DurabilityStrict {
		return service.Usagef("bench: --durability %q: want default or strict", *durability)
	}
	cfg := bench.Config{Durability: *durability, Runs: *runs, LatencyRuns: *latencyRuns, Concurrency: *concurrency, FlowLimit: *flowLimit, SkipFloor: *skipFloor, ProfileDir: *profile, Progress: stdout, Parked: *parked, SweepSchedulers: *sweepers}
	switch *store {
	case "all":
		cfg.Stores = []string{bench.StoreRedis, bench.StoreKV}
	case bench.StoreRedis, bench.StoreKV:
		cfg.Stores = []string{*store}
	default:
		return service.Usagef("bench: --store %q: want redis, kv or all", *store)
	}
	if *runs < 1 || *latencyRuns < 1 || *concurrency < 1 {
		return service.Usagef("bench: --runs, --latency-runs and --concurrency must be at least 1")
	}
	switch {
	case *flowLimit < 0:
		return service.Usagef("bench: --flow-limit %d: give a limit, or 0 for no flow control", *flowLimit)
	case *parked < 0:
		return service.Usagef("bench: --parked %d: give a number of runs, or 0 to skip the phase", *parked)
	case *parked == 0:
		cfg.Parked = -1
	}
	switch {
	case *purgeRate < 1:
		return service.Usagef("bench: --purge-rate %d: want at least 1 run a second", *purgeRate)
	case *history < 0:
		return service.Usagef("bench: --history %d: give a number of ended runs, or 0 to leave the phase out", *history)
	case *history > 0 && *only != "":
		return service.Usagef("bench: --history runs the history phase alone: drop --only %s", *only)
	}
	cfg.History, cfg.HistoryPurgeRate = *history, *purgeRate
	if *sweepers < 1 {
		return service.Usagef("bench: --sweep-schedulers %d: want at least 1", *sweepers)
	}
	if err := benchOnly(&cfg, *only, *parked, *store); err != nil {
		return err
	}
	if *asJSON {
		cfg.Progress = stderr
	}
	rep, err := bench.Run(ctx, cfg)
	if errors.Is(err, bench.ErrNoRedis) {
		return service.UsageError{Msg: err.Error()}
	}
	if err != nil {
		return err
	}
	write := rep.WriteText
	if *asJSON {
		write = rep.WriteJSON
	}
	if err := write(stdout); err != nil {
		return err
	}
	return rep.Failures()
}

// benchOnly sets the phase --only runs alone.
func benchOnly(cfg *bench.Config, only string, parked int, store string) error {
	switch only {
	case "":
	case "parked":
		if parked == 0 {
			return service.Usagef("bench: --only parked with --parked 0: nothing to run")
		}
		if store == bench.StoreKV {
			return service.Usagef("bench: --only parked runs on the Redis store, not --store kv")
		}
		cfg.ParkedOnly = true
	case "fanout":
		cfg.FanOutOnly = true
	default:
		return service.Usagef("bench: --only %q: want parked or fanout", only)
	}
	return nil
}

// cmdBenchWorker is `durable bench-worker`, the hidden command `durable
// bench` runs its one worker process with (bench.RunWorker).
func cmdBenchWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return bench.RunWorker(ctx, args, os.Stdin, stdout, stderr)
}
