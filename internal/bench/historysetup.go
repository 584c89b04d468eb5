package bench

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// historyTwinName is the twin store's name: its Redis key prefix, or its
// KV bucket (the measured store has the stores' default, "durable").
const historyTwinName = "durable-twin"

// historyPhase is the history phase under way on one store.
type historyPhase struct {
	b     *Bench
	sys   *system
	label string
	res   *HistoryResult
	// main is the store that gets the ended runs; twin a store on
	// servers of its own with the same live work and no history, measured
	// in the same rounds (see HistoryResult.Twin).
	main, twin *historyStore
	// tmpl is the real claims-9 run every ended run copies.
	tmpl endedTemplate
	// liveSince is when the live work began: the ended runs are older.
	liveSince time.Time
	// The measured store's own measures: its bytes, what one run
	// occupies, and a wait until it is quiet after the fill.
	storeBytes func(ctx context.Context) (int64, error)
	footprint  func(ctx context.Context, id string, write func() error) (RunFootprint, error)
	settle     func(ctx context.Context) error
	// rounds of each measure (historyRounds unless the bench shrinks it).
	rounds int
	// stepWorkers run the bench-linear steps of the measured store and
	// of its twin.
	stepWorkers []*workerProc
}

// historyStore is one store of the phase, its live work and the
// instruments measuring it.
type historyStore struct {
	// name is the store's key prefix or bucket, "" for the default;
	// ids is what its run ids start with (the two stores' runs are told
	// apart in logs and reports).
	name, ids string
	cl        *client.Client
	store     checkpoint.Store
	// js and the URLs reach the store's servers: the twin has its own.
	js                jetstream.JetStream
	natsURL, redisURL string
	inst              *historyInstruments
	// probes counts the runs started to measure Start.
	probes int
	// stepper: a worker runs the store's bench-linear steps; stepRuns
	// counts the runs it ran.
	stepper  bool
	stepRuns int
	// waiting is how many runs the live work parks.
	waiting int
}

// id names run i of a kind of the store's runs: end (the fill), tmp (the
// template), run (running), wait (waiting) or probe (a measured start).
// The template's id is as long as an ended run's (below a million), so
// that their footprints compare.
func (s *historyStore) id(kind string, i int) string { return runID(s.ids+kind, i) }

func (b *Bench) newHistoryPhase(ctx context.Context, sys *system, res *HistoryResult) (*historyPhase, error) {
	h := &historyPhase{b: b, sys: sys, label: sys.name + " history", res: res,
		main: &historyStore{ids: sys.name + "-h", cl: sys.client, store: sys.client.Store(),
			js: b.js, natsURL: b.srv.NATSURL, redisURL: sys.redisURL}}
	tw, err := b.twinServers(ctx)
	if err != nil {
		return nil, err
	}
	twin := &historyStore{name: historyTwinName, ids: sys.name + "-t", js: tw.js, natsURL: tw.srv.NATSURL}
	h.rounds, h.main.waiting = historyRounds, HistoryWaitingRuns
	if b.cfg.HistoryRounds > 0 {
		h.rounds = b.cfg.HistoryRounds
	}
	if b.cfg.HistoryWaiting > 0 {
		h.main.waiting = b.cfg.HistoryWaiting
	}
	twin.waiting, res.WaitingRuns, res.Rounds = h.main.waiting, h.main.waiting, h.rounds
	switch sys.name {
	case SystemDurableRedis:
		twin.store = redisstore.New(tw.rdb, redisstore.Options{Prefix: historyTwinName})
		twin.redisURL = tw.srv.RedisURL
		h.storeBytes, h.footprint, h.settle = b.redisUsedMemory, b.redisFootprint, b.redisQuiet
	case SystemDurableKV:
		kv, err := kvstore.New(ctx, tw.js, kvstore.Options{Bucket: historyTwinName})
		if err != nil {
			return nil, fmt.Errorf("open the twin KV store: %w", err)
		}
		twin.store = kv
		h.storeBytes = b.kvStreamBytes
		h.footprint = func(ctx context.Context, _ string, write func() error) (RunFootprint, error) {
			return bytesDelta(ctx, b.kvStreamBytes, write)
		}
		h.settle = func(context.Context) error { return nil }
	default:
		return nil, fmt.Errorf("history phase: no store measures for %s", sys.name)
	}
	quiet := h.settle
	h.settle = func(ctx context.Context) error {
		if err := quiet(ctx); err != nil {
			return err
		}
		// A fill leaves gigabytes of dirty pages (Redis's AOF, the KV
		// stream's blocks) that the kernel writes back over the next
		// minutes: the main store's own writes wait behind them, the
		// twin's hardly, which the measure would count as history's cost.
		return flushDisk()
	}
	twin.cl = client.New(tw.js, twin.store)
	h.twin = twin
	return h, nil
}

// setUp runs the template run to its end, then sets up the live work of
// both stores (the running runs, the waiting runs) and their instruments.
func (h *historyPhase) setUp(ctx context.Context) error {
	if err := h.runTemplate(ctx); err != nil {
		return err
	}
	// The twin's claims-9 runs start without a worker of its own: it gets
	// the registration the template's worker wrote.
	if err := copyRegistration(ctx, h.main.store, h.twin.store, Workflow); err != nil {
		return fmt.Errorf("%s: %w", h.label, err)
	}
	h.liveSince = time.Now()
	for _, s := range []*historyStore{h.main, h.twin} {
		// The park worker makes the streams on the twin's servers.
		if err := h.parkWaiting(ctx, s); err != nil {
			return err
		}
		if err := h.startRunning(ctx, s); err != nil {
			return err
		}
		inst, err := h.b.newHistoryInstruments(h.sys.name+"-"+cmpOr(s.name, "main"), s)
		s.inst = inst
		if err != nil {
			return fmt.Errorf("%s: %w", h.label, err)
		}
	}
	// Each store has a step worker: step p50 compares to the twin's in
	// the same rounds, as every other figure does.
	for _, s := range []*historyStore{h.main, h.twin} {
		wp, err := h.startWorker(ctx, s, WorkloadFanOut)
		if err != nil {
			return err
		}
		h.stepWorkers, s.stepper = append(h.stepWorkers, wp), true
	}
	return nil
}

// close releases what setUp opened.
func (h *historyPhase) close() {
	for _, wp := range h.stepWorkers {
		wp.stop(workerGrace)
	}
	h.main.inst.close()
	h.twin.inst.close()
}

func cmpOr(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// copyRegistration registers workflow on to as it is registered on from.
func copyRegistration(ctx context.Context, from, to checkpoint.Registry, workflow string) error {
	infos, err := from.Workflows(ctx)
	if err != nil {
		return fmt.Errorf("read registered workflows: %w", err)
	}
	for _, info := range infos {
		if info.Name == workflow {
			if err := to.RegisterWorkflow(ctx, info); err != nil {
				return fmt.Errorf("register %s on the twin store: %w", workflow, err)
			}
		}
	}
	return nil
}

// endedTemplate is a real claims-9 run, ended, with its checkpoints.
type endedTemplate struct {
	id  string
	run checkpoint.Run
	cps []checkpoint.Checkpoint
}

// runTemplate runs one claims-9 run through a worker process, reads it
// back as the template, and stops the worker (the runs started later
// stay queued).
func (h *historyPhase) runTemplate(ctx context.Context) error {
	wp, err := h.startWorker(ctx, h.main, WorkloadClaims9)
	if err != nil {
		return err
	}
	defer wp.stop(workerGrace)
	id := h.main.id("tmp", 0)
	fp, err := h.footprint(ctx, id, func() error {
		_, err := runToEnd(ctx, h.main.cl, Workflow, id, Input(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: template run: %w", h.label, err)
	}
	h.res.Template = fp
	t := endedTemplate{id: id}
	if t.run, err = h.main.store.GetRun(ctx, id); err != nil {
		return fmt.Errorf("%s: template run: %w", h.label, err)
	}
	if t.cps, err = h.main.store.Checkpoints(ctx, id); err != nil {
		return fmt.Errorf("%s: template run: %w", h.label, err)
	}
	if t.run.Status != checkpoint.StatusCompleted || len(t.cps) != StepsPerRun {
		return fmt.Errorf("%s: template run %s is %s with %d checkpoints, want completed with %d", h.label, id, t.run.Status, len(t.cps), StepsPerRun)
	}
	h.tmpl = t
	return nil
}

// startWorker starts a worker process of workload on store s.
func (h *historyPhase) startWorker(ctx context.Context, s *historyStore, workload string) (*workerProc, error) {
	extra := []string{"--workload", workload}
	if s.name != "" {
		extra = append(extra, "--store-name", s.name)
	}
	args := workerArgs(ModeDurable, s.natsURL, s.redisURL, h.b.cfg.Concurrency, h.b.cfg.WorkerLogLevel, "", extra...)
	log := filepath.Join(h.b.dir, fmt.Sprintf("worker-%s-history-%s-%s.log", h.sys.name, cmpOr(s.name, "main"), workload))
	wp, err := startWorker(ctx, h.b.cfg.WorkerCommand, args, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.label, err)
	}
	return wp, nil
}

// forRun is the template as run id created at created: its record and
// checkpoints with the id (in the input and states too) and the times
// moved.
func (t *endedTemplate) forRun(id string, created time.Time) (checkpoint.Run, []checkpoint.Checkpoint) {
	from, to := []byte(strconv.Quote(t.id)), []byte(strconv.Quote(id))
	shift := created.Sub(t.run.CreatedAt)
	run := t.run
	run.ID, run.Rev = id, 0
	run.Input = bytes.ReplaceAll(t.run.Input, from, to)
	run.CreatedAt, run.UpdatedAt = created, t.run.UpdatedAt.Add(shift)
	cps := make([]checkpoint.Checkpoint, len(t.cps))
	for i, cp := range t.cps {
		cp.RunID = id
		cp.State = bytes.ReplaceAll(cp.State, from, to)
		cp.At = cp.At.Add(shift)
		cps[i] = cp
	}
	return run, cps
}

// startRunning starts HistoryRunningRuns claims-9 runs on s; no worker
// takes them, so they stay running at step 1 with their message queued.
func (h *historyPhase) startRunning(ctx context.Context, s *historyStore) error {
	ids := make([]string, HistoryRunningRuns)
	for i := range ids {
		ids[i] = s.id("run", i)
	}
	if err := forEach(ctx, ids, 16, s.startClaim); err != nil {
		return fmt.Errorf("%s: start the running runs: %w", h.label, err)
	}
	return nil
}

func (s *historyStore) startClaim(ctx context.Context, id string) error {
	_, created, err := s.cl.Start(ctx, client.StartRequest{Workflow: Workflow, RunID: id, Input: Input(id), By: "bench"})
	if err == nil && !created {
		err = fmt.Errorf("run %s existed already", id)
	}
	return err
}

// parkWaiting parks HistoryWaitingRuns bench-park runs on s at an approval
// that expires after historyWaitTTL, through a worker process it stops
// once every one waits (a parked run holds nothing in a worker).
func (h *historyPhase) parkWaiting(ctx context.Context, s *historyStore) error {
	wp, err := h.startWorker(ctx, s, WorkloadPark)
	if err != nil {
		return err
	}
	defer wp.stop(workerGrace)
	ids := make([]string, s.waiting)
	for i := range ids {
		ids[i] = s.id("wait", i)
	}
	label := h.label + " live work"
	if s.name != "" {
		label += ", " + s.name
	}
	if err := awaitRegistered(ctx, s.store, ParkWorkflow, 10*time.Second); err != nil {
		return fmt.Errorf("%s: %w; worker log %s", label, err, wp.logPath)
	}
	h.b.progress.begin(label, s.waiting)
	began := time.Now()
	err = forEach(ctx, ids, parkStartConcurrency, func(ctx context.Context, id string) error {
		_, created, err := s.cl.Start(ctx, client.StartRequest{Workflow: ParkWorkflow, RunID: id, Input: ParkInput(id, historyWaitTTL), By: "bench"})
		if err == nil && !created {
			err = fmt.Errorf("run %s existed already", id)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: start the waiting runs: %w", h.label, err)
	}
	var waiting atomic.Int64
	err = forEach(ctx, ids, 16, func(ctx context.Context, id string) error {
		defer func() { h.b.progress.update(int(waiting.Add(1))) }()
		return awaitWaiting(ctx, s.store, id, time.Minute)
	})
	if err != nil {
		return fmt.Errorf("%s: %w; worker log %s", h.label, err, wp.logPath)
	}
	h.b.progress.end("%d running runs queued, %d runs parked in %.1fs", HistoryRunningRuns, s.waiting, time.Since(began).Seconds())
	return nil
}

// awaitRegistered polls store's workflows until workflow is among them,
// for at most within: a worker that said it is ready registered it.
func awaitRegistered(ctx context.Context, store checkpoint.Registry, workflow string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		infos, err := store.Workflows(ctx)
		if err != nil {
			return fmt.Errorf("read the registered workflows: %w", err)
		}
		var names []string
		for _, in := range infos {
			if in.Name == workflow {
				return nil
			}
			names = append(names, in.Name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("workflow %s not registered %s after its worker was ready (the store lists %v)", workflow, within, names)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// awaitWaiting polls run id until it waits, for at most within.
func awaitWaiting(ctx context.Context, store checkpoint.Runs, id string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		run, err := store.GetRun(ctx, id)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		switch {
		case run.Status == checkpoint.StatusWaiting:
			return nil
		case run.Status.Terminal():
			return fmt.Errorf("run %s ended %s before it parked: %s", id, run.Status, run.Error)
		case time.Now().After(deadline):
			return fmt.Errorf("run %s not parked after %s (%s at step %d)", id, within, run.Status, run.Step)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// benchTwin is the servers of the history phase's twin: a nats-server
// and, when the bench has one, a redis-server of its own, so that the
// twin measures what the same live work costs with no history anywhere
// on its servers (a history grows the server's keyspace or stream, and
// a twin beside it on the same servers would share that), at the same
// moment as the store with the history.
type benchTwin struct {
	srv *Servers
	nc  *nats.Conn
	js  jetstream.JetStream
	rdb *redis.Client
}

// twinServers starts the twin's servers once, in the bench's directory.
func (b *Bench) twinServers(ctx context.Context) (*benchTwin, error) {
	if b.twin != nil {
		return b.twin, nil
	}
	srv, err := StartServers(ctx, filepath.Join(b.dir, "twin"), b.srv.RedisURL != "", b.srv.strict)
	if err != nil {
		return nil, fmt.Errorf("start the twin's servers: %w", err)
	}
	tw := &benchTwin{srv: srv}
	b.twin = tw
	if tw.nc, err = nats.Connect(srv.NATSURL, nats.Name("durable-bench-twin")); err != nil {
		return nil, err
	}
	if tw.js, err = jetstream.New(tw.nc); err != nil {
		return nil, err
	}
	if srv.RedisURL != "" {
		opt, err := redis.ParseURL(srv.RedisURL)
		if err != nil {
			return nil, err
		}
		tw.rdb = redis.NewClient(opt)
	}
	return tw, nil
}

func (tw *benchTwin) close() {
	if tw == nil {
		return
	}
	if tw.rdb != nil {
		_ = tw.rdb.Close()
	}
	if tw.nc != nil {
		tw.nc.Close()
	}
	tw.srv.Close()
}
