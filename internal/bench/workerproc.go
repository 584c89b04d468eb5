package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/worker"
)

// Worker modes: durable's worker with the claims-9 workflow, or the floor.
const (
	ModeDurable        = "durable"
	ModeFloor          = "floor"
	ModeFloorPipelined = "floor-pipelined"
)

// readyLine is what a worker process prints on stdout once it takes work.
const readyLine = "ready"

// RunWorker is the bench's worker process (`durable bench-worker`): one
// process, registering only the claims-9 workflow (or bench-park, or
// running the floor), until ctx ends. It prints "ready" on stdout once its
// consumer exists and its workflow is registered, and logs to stderr.
// With --stats it answers each line "stats" (or "stats gc": after a
// garbage collection that returns freed memory to the OS) read from stdin
// with a stats line on stdout (see workerStats).
//
//	bench-worker --mode durable|floor|floor-pipelined [--workload claims9|park] --nats URL [--redis URL] [--store-name NAME] --concurrency N [--log-level L] [--stats]
func RunWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	o, err := parseWorkerFlags(args, stderr)
	if err != nil {
		return err
	}
	// As `durable worker` logs (service.NewLogger: lines logged at once
	// share a write), at the bench's level.
	log := service.NewLogger(stderr, "bench-worker").Level(o.level).With().Str("mode", o.mode).Logger()

	nc, err := nats.Connect(o.natsURL, nats.Name("durable-bench-worker"))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", o.natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	rdb, err := connectRedis(ctx, o.redisURL)
	if err != nil {
		return err
	}
	if rdb != nil {
		defer rdb.Close()
	}
	out := &lineWriter{w: stdout}
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}

	switch o.mode {
	case ModeFloor:
		c, err := setupFloor(ctx, js, syncFloor)
		if err != nil {
			return err
		}
		out.writeLine(readyLine)
		return (&floorWorker{js: js, rdb: rdb, concurrency: o.concurrency, log: log}).run(ctx, c)
	case ModeFloorPipelined:
		c, err := setupFloor(ctx, js, pipelinedFloor)
		if err != nil {
			return err
		}
		out.writeLine(readyLine)
		return (&pipelinedFloorWorker{js: js, rdb: rdb, concurrency: o.concurrency, log: log}).run(ctx, c)
	}
	return runDurableWorker(ctx, o, js, rdb, &log, stdin, out)
}

// workerOptions are the flags of `durable bench-worker`.
type workerOptions struct {
	mode, workload, natsURL, redisURL, cpuProfile, storeName string
	stats                                                    bool
	concurrency                                              int
	// flowLimit > 0 sets a concurrency limit of that many on FlowResource,
	// which every claims-9 step uses, and runs the worker with it.
	flowLimit int
	level     zerolog.Level
}

func parseWorkerFlags(args []string, stderr io.Writer) (workerOptions, error) {
	var o workerOptions
	fs := flag.NewFlagSet("bench-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.mode, "mode", ModeDurable, "durable (claims-9 on durable's worker), floor (the bare pipeline) or floor-pipelined (the bare pipeline, batched)")
	fs.StringVar(&o.workload, "workload", WorkloadClaims9, "durable's workflow: claims9, park (bench-park, for the waiting-at-scale phase) or fanout (bench-fanout and bench-linear)")
	fs.BoolVar(&o.stats, "stats", false, "answer \"stats\" and \"stats gc\" lines on stdin with a stats line on stdout")
	fs.StringVar(&o.natsURL, "nats", "", "NATS server URL (required)")
	fs.StringVar(&o.redisURL, "redis", "", "Redis URL: durable's checkpoint store (empty: JetStream KV); required by the floor")
	fs.StringVar(&o.storeName, "store-name", "", "durable's store: its Redis key prefix or its KV bucket (empty: the store's default, durable)")
	fs.IntVar(&o.concurrency, "concurrency", 128, "steps in flight")
	fs.IntVar(&o.flowLimit, "flow-limit", 0, "N: a concurrency limit of N on the resource every claims-9 step uses (0: none, and no flow store)")
	level := fs.String("log-level", "info", "zerolog level")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the process, from ready to exit, to `file`")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("bench-worker: unexpected argument %q", fs.Arg(0))
	case o.natsURL == "":
		return o, errors.New("bench-worker: --nats is required")
	case o.mode != ModeDurable && o.mode != ModeFloor && o.mode != ModeFloorPipelined:
		return o, fmt.Errorf("bench-worker: --mode %q: want durable, floor or floor-pipelined", o.mode)
	case o.workload != WorkloadClaims9 && o.workload != WorkloadPark && o.workload != WorkloadFanOut:
		return o, fmt.Errorf("bench-worker: --workload %q: want %s, %s or %s", o.workload, WorkloadClaims9, WorkloadPark, WorkloadFanOut)
	case o.mode != ModeDurable && o.redisURL == "":
		return o, errors.New("bench-worker: a floor needs --redis")
	case o.concurrency < 1:
		return o, fmt.Errorf("bench-worker: --concurrency %d: want at least 1", o.concurrency)
	case o.flowLimit < 0:
		return o, fmt.Errorf("bench-worker: --flow-limit %d: want 0 (none) or more", o.flowLimit)
	}
	lvl, err := zerolog.ParseLevel(*level)
	if err != nil || lvl == zerolog.NoLevel {
		return o, fmt.Errorf("bench-worker: --log-level %q: want debug, info, warn or error", *level)
	}
	o.level = lvl
	return o, nil
}

// connectRedis connects to the Redis at url; without a url it returns nil.
func connectRedis(ctx context.Context, url string) (*redis.Client, error) {
	if url == "" {
		return nil, nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis URL %s: %w", url, err)
	}
	rdb := redis.NewClient(opt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("connect to Redis at %s: %w", url, err)
	}
	return rdb, nil
}

// lineWriter writes whole lines to w. Lines to stdout come from the ready
// call and the stats loop: one writer at a time.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) writeLine(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, line)
}

// runDurableWorker runs durable's worker on the store of rdb (JetStream KV
// when nil) until ctx ends.
func runDurableWorker(ctx context.Context, o workerOptions, js jetstream.JetStream, rdb *redis.Client, log *zerolog.Logger, stdin io.Reader, out *lineWriter) error {
	var store checkpoint.Store
	var err error
	if rdb != nil {
		store = redisstore.New(rdb, redisstore.Options{Prefix: o.storeName})
	} else if store, err = kvstore.New(ctx, js, kvstore.Options{Bucket: o.storeName}); err != nil {
		return fmt.Errorf("open JetStream KV store: %w", err)
	}
	flowStore, err := openFlow(ctx, js, o.flowLimit)
	if err != nil {
		return err
	}
	reg := Registry()
	switch o.workload {
	case WorkloadPark:
		reg = ParkRegistry()
	case WorkloadFanOut:
		reg = FanOutRegistry()
	}
	w, err := worker.New(worker.Config{
		JetStream: js, Store: store, Registry: reg,
		Concurrency: o.concurrency, Logger: log, Flow: flowStore,
	})
	if err != nil {
		return err
	}
	// Run provisions again; Setup first so that "ready" means runs can start.
	if _, err := w.Setup(ctx); err != nil {
		return err
	}
	if o.stats {
		// The reader blocks on stdin until the bench closes it or the
		// process exits: it is not waited for.
		go serveStats(stdin, out.writeLine, func() int64 { return w.Stats().Parked })
	}
	out.writeLine(readyLine)
	return w.Run(ctx)
}

// Workloads of durable's worker process.
const (
	WorkloadClaims9 = "claims9"
	WorkloadPark    = "park"
	WorkloadFanOut  = "fanout"
)

// statsPrefix starts a worker's stats line.
const statsPrefix = "stats "

// workerStats is what a worker process says about itself in a stats line:
//
//	stats goroutines=12 heap_inuse=4112384 parked=100000
type workerStats struct {
	Goroutines int
	HeapInuse  int64 // bytes in in-use heap spans (runtime.MemStats.HeapInuse)
	Parked     int64 // runs this worker parked
}

func (s workerStats) line() string {
	return fmt.Sprintf("%sgoroutines=%d heap_inuse=%d parked=%d", statsPrefix, s.Goroutines, s.HeapInuse, s.Parked)
}

func parseWorkerStats(line string) (workerStats, error) {
	var s workerStats
	rest, ok := strings.CutPrefix(line, statsPrefix)
	if !ok {
		return s, fmt.Errorf("not a stats line: %q", line)
	}
	for _, f := range strings.Fields(rest) {
		k, v, _ := strings.Cut(f, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("stats line %q: %s: %w", line, k, err)
		}
		switch k {
		case "goroutines":
			s.Goroutines = int(n)
		case "heap_inuse":
			s.HeapInuse = n
		case "parked":
			s.Parked = n
		}
	}
	return s, nil
}

// serveStats answers "stats" and "stats gc" lines from in until it ends.
func serveStats(in io.Reader, writeLine func(string), parked func() int64) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch strings.TrimSpace(sc.Text()) {
		case "stats gc":
			// What the runtime does by itself within two minutes of
			// quiet (forced GC, background scavenger), done now.
			debug.FreeOSMemory()
		case "stats":
		default:
			continue
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		writeLine(workerStats{Goroutines: runtime.NumGoroutine(), HeapInuse: int64(ms.HeapInuse), Parked: parked()}.line())
	}
}

// startCPUProfile profiles the process into path until stop is called,
// which also writes the allocations since the start beside it
// (<path without .pprof>.allocs.pprof; go tool pprof -sample_index=alloc_space).
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench-worker: --cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench-worker: --cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		if a, err := os.Create(strings.TrimSuffix(path, ".pprof") + ".allocs.pprof"); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			_ = a.Close()
		}
	}, nil
}

// workerProc is a running worker process.
type workerProc struct {
	*child
	logPath string
	// stdin asks a worker started with --stats for its stats, which
	// arrive on statsc.
	stdin  io.WriteCloser
	statsc chan string
}

// startWorker starts a worker process with args and waits for its ready
// line. Its stderr goes to logPath.
func startWorker(ctx context.Context, command func(args []string) *exec.Cmd, args []string, logPath string) (*workerProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := command(args)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	statsc := make(chan string, 1)
	drain := func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case !signalled && line == readyLine:
				close(ready)
				signalled = true
			case strings.HasPrefix(line, statsPrefix):
				select {
				case statsc <- line:
				default: // nobody asked: drop it
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}
	c, err := startChild(cmd, drain)
	if err != nil {
		return nil, fmt.Errorf("start worker process %s: %w", filepath.Base(cmd.Path), err)
	}
	p := &workerProc{child: c, logPath: logPath, stdin: stdin, statsc: statsc}
	select {
	case <-ready:
		return p, nil
	case <-c.exitc:
		return nil, fmt.Errorf("worker process exited before it was ready (%v): %s", c.err, p.logTail())
	case <-time.After(60 * time.Second):
		p.stop(0)
		return nil, fmt.Errorf("worker process not ready after 60s: %s", p.logTail())
	case <-ctx.Done():
		p.stop(0)
		return nil, ctx.Err()
	}
}

// rssSample is a process's resident set size, in bytes: all of it
// (VmRSS), and its anonymous memory alone (RssAnon: without the pages of
// the executable and other files).
type rssSample struct{ RSS, Anon int64 }

// stats asks a worker started with --stats for its stats, after a
// garbage collection when gc is set, and reads its resident set size.
func (p *workerProc) stats(ctx context.Context, gc bool) (workerStats, rssSample, error) {
	cmd := "stats\n"
	if gc {
		cmd = "stats gc\n"
	}
	select { // a stale answer from an earlier timeout
	case <-p.statsc:
	default:
	}
	if _, err := io.WriteString(p.stdin, cmd); err != nil {
		return workerStats{}, rssSample{}, fmt.Errorf("ask the worker for its stats: %w", err)
	}
	select {
	case line := <-p.statsc:
		st, err := parseWorkerStats(line)
		if err != nil {
			return st, rssSample{}, err
		}
		var rss rssSample
		if rss.RSS, err = procRSS(p.pid()); err != nil {
			return st, rss, err
		}
		rss.Anon, err = procRSSAnon(p.pid())
		return st, rss, err
	case <-p.exitc:
		return workerStats{}, rssSample{}, fmt.Errorf("the worker process exited (%v): %s", p.err, p.logTail())
	case <-time.After(10 * time.Second):
		return workerStats{}, rssSample{}, errors.New("the worker process did not answer a stats request within 10s")
	case <-ctx.Done():
		return workerStats{}, rssSample{}, ctx.Err()
	}
}

// workerGrace is how long a stopped worker may drain before it is killed.
const workerGrace = 10 * time.Second

func (p *workerProc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || len(b) == 0 {
		return "(no worker log)"
	}
	return "worker log " + p.logPath + ":\n" + tail(string(b), 10)
}

// ownWorker runs this executable as `<exe> bench-worker ARGS`.
func ownWorker() (func(args []string) *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable to start the worker: %w", err)
	}
	return func(args []string) *exec.Cmd {
		return exec.Command(exe, append([]string{"bench-worker"}, args...)...)
	}, nil
}

// workerArgs are the flags of a worker process.
// openFlow opens the flow store and sets a concurrency limit of limit on
// FlowResource; nil when limit is 0.
func openFlow(ctx context.Context, js jetstream.JetStream, limit int) (*flow.Store, error) {
	if limit == 0 {
		return nil, nil
	}
	st, err := flow.NewStore(ctx, js, flow.StoreOptions{})
	if err != nil {
		return nil, err
	}
	if _, err := st.SetConcurrency(ctx, FlowResource, limit, "bench"); err != nil {
		return nil, err
	}
	return st, nil
}

func workerArgs(mode, natsURL, redisURL string, concurrency int, level, cpuProfile string, extra ...string) []string {
	args := []string{"--mode", mode, "--nats", natsURL, "--concurrency", strconv.Itoa(concurrency), "--log-level", level}
	args = append(args, extra...)
	if redisURL != "" {
		args = append(args, "--redis", redisURL)
	}
	if cpuProfile != "" {
		args = append(args, "--cpuprofile", cpuProfile)
	}
	return args
}
