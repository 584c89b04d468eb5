package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
)

// TestChaos runs the fleet as processes under faults and checks the
// invariants durable promises. Short form by default; DURABLE_CHAOS=full
// for the full one (`make chaos`).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos suite: a fleet of processes under faults")
	}
	cfg, err := configFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := seedFromEnv()
	if err != nil {
		t.Fatalf("DURABLE_CHAOS_SEED: %v", err)
	}
	t.Logf("chaos %s form, seed %d (DURABLE_CHAOS_SEED=%d repeats the random choices): %d claims, %d agent runs, %d fan-outs, %d batches, %d shipments, %d workers, %d schedulers, faults for %s",
		cfg.name, seed, seed, cfg.claims, cfg.agents, cfg.fanouts, cfg.batches, cfg.shipments, cfg.workers, cfg.schedulers, cfg.window)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))

	e := newEnv(t, cfg)
	runs := plan(cfg, rng)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drv := newApproverDriver(e)
	drvDone := make(chan struct{})
	go func() { defer close(drvDone); drv.run(ctx, 250*time.Millisecond) }()
	sig := &signaller{a: newApproverDriver(e)}
	sigDone := make(chan struct{})
	go func() { defer close(sigDone); sig.run(ctx, runs, 300*time.Millisecond) }()

	// Faults and load together: runs start over the first part of the
	// window, faults go on for all of it.
	begin := time.Now()
	inj := newInjector(e, cfg, rng)
	injDone := make(chan struct{})
	go func() { defer close(injDone); inj.run(ctx, begin, begin.Add(cfg.window)) }()
	st := &starter{e: e}
	startCtx, startCancel := context.WithTimeout(ctx, cfg.window+cfg.settle)
	err = st.run(startCtx, runs, time.Duration(float64(cfg.window)*cfg.startShare))
	startCancel()
	if err != nil {
		e.dumpLogs(3000)
		t.Fatalf("starting runs: %v", err)
	}
	<-injDone
	chaosEnd := time.Now()
	for _, err := range inj.errs {
		t.Errorf("fault injection: %v", err)
	}

	// Settle: approvals go on until every run has ended.
	settleDeadline := time.Now().Add(cfg.settle)
	for {
		open := 0
		for _, r := range runs {
			run, err := e.store.GetRun(ctx, r.id)
			if err != nil || !run.Status.Terminal() {
				open++
			}
		}
		if open == 0 {
			break
		}
		if time.Now().After(settleDeadline) {
			t.Errorf("%d runs did not end within %s after the faults stopped", open, cfg.settle)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	settled := time.Now()
	cancel()
	<-drvDone
	<-sigDone

	// Nothing left unacked: replays and stale deliveries are acked too.
	rep := &report{form: cfg.name, seed: seed, claims: cfg.claims, agents: cfg.agents, fanouts: cfg.fanouts, batches: cfg.batches, shipments: cfg.shipments, runs: len(runs)}
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ccancel()
	if rep.Queue, err = fleetcheck.WaitDrained(cctx, e.js, 60*time.Second, 250*time.Millisecond); err != nil {
		t.Errorf("step consumers: %v", err)
	}

	accepted, status, errs := drv.snapshot()
	if rep.Report, err = check(cctx, e, runs, accepted); err != nil {
		t.Fatalf("reading the stores: %v", err)
	}
	// The run index agrees with the records: the kills and Redis
	// restarts fell between no record and its index entries.
	problems, err := checkIndex(cctx, e)
	if err != nil {
		t.Fatalf("reading the run index: %v", err)
	}
	for _, p := range problems {
		t.Errorf("run index: %s", p)
	}
	rep.faults = map[string]int{}
	for _, k := range []string{faultKillWorker, faultRestartNATS, faultRestartRedis, faultStopWorker, faultPauseRedis} {
		rep.faults[k] = inj.count(k)
	}
	checkLogs(e, inj.zombies, rep)
	rep.exits = e.allExits()
	rep.startRetries = st.retries.Load()
	rep.decideStatus, rep.decideErrors = status, errs
	_, rep.signalStatus, rep.signalErrors = sig.a.snapshot()
	rep.wall, rep.chaos, rep.settle = time.Since(begin), chaosEnd.Sub(begin), settled.Sub(chaosEnd)

	var buf bytes.Buffer
	rep.print(&buf)
	t.Log(buf.String())
	fmt.Fprint(os.Stdout, buf.String())

	// The verdict.
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicate payments", rep.Duplicates)
	}
	if len(rep.Unfinished) != 0 {
		t.Errorf("%d runs lost", len(rep.Unfinished))
	}
	if len(rep.Problems) != 0 {
		t.Errorf("%d invariant violations", len(rep.Problems))
	}
	if len(rep.StepFailures) != 0 {
		t.Errorf("%d step failures counted against retry budgets for infrastructure faults", len(rep.StepFailures))
	}
	if len(rep.exits) != 0 {
		t.Errorf("%d processes ended on their own: a service must ride out its dependencies' outages", len(rep.exits))
	}
	if !rep.Drained() {
		t.Errorf("step consumers hold %d pending and %d unacked messages", rep.Pending, rep.AckPending)
	}
	if rep.Completed+rep.Dead+rep.Failed != len(runs) {
		t.Errorf("%d of %d runs ended", rep.Completed+rep.Dead+rep.Failed, len(runs))
	}
	for k, want := range map[string]int{faultKillWorker: cfg.workerKills, faultRestartNATS: cfg.natsRestarts, faultRestartRedis: cfg.redisRestarts, faultStopWorker: cfg.stops, faultPauseRedis: cfg.redisPauses} {
		if rep.faults[k] < want {
			t.Errorf("%d × %s injected, want at least %d", rep.faults[k], k, want)
		}
	}
	if t.Failed() {
		e.dumpLogs(3000)
		keepLogs(t, e)
	}
}

// keepLogs copies the logs out of the temp dir of a failed run.
func keepLogs(t *testing.T, e *env) {
	dst, err := os.MkdirTemp("", "durable-chaos-failed-")
	if err != nil {
		return
	}
	for _, p := range append(e.logs(), filepath.Join(e.dir, "payments.jsonl")) {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// The servers' logs are nats.N.log and redis.N.log.
		_ = os.WriteFile(filepath.Join(dst, filepath.Base(p)), b, 0o644)
	}
	t.Logf("logs of the failed run copied to %s", dst)
}

// checkLogs reads the workers' logs: no step may be committed twice (a
// zombie that advanced a run another worker had advanced would log a
// second commit), and what each zombie did once it was let go on.
func checkLogs(e *env, zombies []zombie, rep *report) {
	type at struct {
		path string
		off  int64
	}
	commits := map[string][]at{}
	scanLogs(filepath.Join(e.dir, "worker-*.log"), func(path string, off int64, l logLine) {
		switch l.Message {
		case "step committed":
			k := fmt.Sprintf("%s:%d", l.RunID, l.Step)
			commits[k] = append(commits[k], at{path, off})
		case "commit lost; continuing with the stored result":
			rep.lostCommits++
		}
	})
	for k, list := range commits {
		if len(list) > 1 {
			var where []string
			for _, a := range list {
				where = append(where, filepath.Base(a.path))
			}
			rep.Problems = append(rep.Problems, fmt.Sprintf("step %s committed %d times (%v)", k, len(list), where))
		}
	}
	for _, z := range zombies {
		var committed, lost, other int
		scanLogs(z.log, func(_ string, off int64, l logLine) {
			if off < z.offset {
				return
			}
			switch {
			case l.Message == "step committed":
				committed++
			case l.Message == "commit lost; continuing with the stored result":
				lost++
			case l.RunID != "":
				other++
			}
		})
		line := fmt.Sprintf("%s pid %d frozen %s", z.member, z.pid, z.thawed.Sub(z.frozen).Round(100*time.Millisecond))
		if z.run != "" {
			line += fmt.Sprintf(" while its payment for %s was answered", z.run)
			if cp, err := e.store.Checkpoint(context.Background(), z.run, 6); err == nil {
				line += fmt.Sprintf("; step 6 committed by attempt %d at %s, zombie let go at %s", cp.Attempt, cp.At.Format("15:04:05.000"), z.thawed.UTC().Format("15:04:05.000"))
			}
			// The zombie must not advance a run that another worker
			// advanced while it was frozen.
			var mine, others int
			for _, c := range commits[z.run+":6"] {
				if c.path == z.log && c.off >= z.offset {
					mine++
				} else {
					others++
				}
			}
			if mine > 0 && others > 0 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("zombie %s committed step 6 of %s that another worker had committed", z.member, z.run))
			}
		}
		line += fmt.Sprintf("; afterwards: %d commits, %d commits lost to the worker that took over, %d other step log lines", committed, lost, other)
		rep.zombieLines = append(rep.zombieLines, line)
	}
}
