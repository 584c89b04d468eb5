package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
)

// fleetDir is where the fleet keeps its logs and data: a temp dir removed
// at the end, or with DURABLE_FLEET_KEEP=1 one that stays.
func fleetDir(t *testing.T) string {
	if os.Getenv("DURABLE_FLEET_KEEP") == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "durable-fleet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("logs and data kept in %s", dir)
	return dir
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

// TestFleet runs durable as a fleet on loopback: a three-node JetStream
// cluster (streams and buckets at R3), a Redis Cluster of three primaries
// and three replicas, four workers and two schedulers of the reference
// binary. It starts claims (most paid without approval, some approved by
// the test) and refund-agent runs (approved by the test when they park)
// at a steady pace, and meanwhile SIGKILLs the NATS node that leads the
// step stream (restarted on its store 10s later), fails over a Redis
// primary (SIGKILL; its replica is promoted; the old primary comes back
// as a replica) and SIGKILLs a worker. Then every run must have completed
// with checkpoints 1..n, each claim and refund paid exactly once, the
// consumers drained, no dead letter, no step failure charged to a retry
// budget, no CROSSSLOT in any log, no process ended on its own.
//
// It runs with DURABLE_FLEET=1 (make fleet). DURABLE_FLEET_CLAIMS,
// DURABLE_FLEET_APPROVALS and DURABLE_FLEET_REFUNDS size the load (200,
// 20, 20); DURABLE_FLEET_KEEP=1 keeps the logs.
func TestFleet(t *testing.T) {
	if os.Getenv("DURABLE_FLEET") == "" {
		t.Skip("the fleet test (9 server processes, 6 services, faults) runs with DURABLE_FLEET=1: make fleet")
	}
	// go-redis logs the test client's failed dials (a primary down):
	// counted, not printed.
	var redisLog countLogger
	redis.SetLogger(&redisLog)
	dir := fleetDir(t)
	runs := plan(envInt(t, "DURABLE_FLEET_CLAIMS", 200), envInt(t, "DURABLE_FLEET_APPROVALS", 20), envInt(t, "DURABLE_FLEET_REFUNDS", 20))
	t0 := time.Now()
	f := Start(t, dir, Options{Workers: 4, Schedulers: 2, SlowPayments: true})
	t.Logf("fleet up in %s: nats %s; redis %s; payments %s", time.Since(t0).Round(time.Millisecond), f.NATSURL, f.RedisURL, f.PaymentsURL)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &starter{f: f}
	dec := newApprover(f)
	fx := &faults{f: f}
	var wg sync.WaitGroup
	startErr := make(chan error, 1)
	loadStart := time.Now()
	wg.Add(3)
	go func() { defer wg.Done(); startErr <- st.run(ctx, runs, 60*time.Second) }()
	go func() { defer wg.Done(); dec.run(ctx, runs) }()
	go func() { defer wg.Done(); fx.run(ctx, loadStart) }()

	// Every run completes within the deadline, or the test reports what
	// is left.
	deadline := loadStart.Add(4 * time.Minute)
	pending := map[string]bool{}
	for _, r := range runs {
		pending[r.id] = true
	}
	lastLog := time.Now()
	for len(pending) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		for _, id := range finished(ctx, f, pending) {
			delete(pending, id)
		}
		if time.Since(lastLog) >= 10*time.Second {
			t.Logf("+%s: %d of %d runs not finished", time.Since(loadStart).Round(time.Second), len(pending), len(runs))
			lastLog = time.Now()
		}
	}
	select {
	case err := <-startErr:
		if err != nil {
			t.Errorf("starting the runs: %v", err)
		}
	default:
		t.Errorf("the runs were not all started by the deadline")
	}
	// Let the faults finish their schedule, and the last acks land.
	waitFaults := time.Now().Add(90 * time.Second)
	for {
		ev, _, _ := fx.snapshot()
		if len(ev) > 0 && strings.HasSuffix(ev[len(ev)-1].what, "restarted") && strings.HasPrefix(ev[len(ev)-1].what, "worker") || time.Now().After(waitFaults) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()

	rep := &report{topology: fmt.Sprintf("%d NATS nodes (streams R%d), Redis Cluster %d primaries + %d replicas, %d workers, %d schedulers, --ack-wait %s",
		len(f.NATS.Nodes), f.Opts.Replicas, f.Opts.RedisPrimaries, f.Opts.RedisPrimaries*f.Opts.RedisReplicas, len(f.Workers), len(f.Schedulers), f.Opts.AckWait)}
	rep.start = st.first
	rep.startRetry = st.retries.Load()
	rep.startErrs = map[string]int64{}
	st.errs.Range(func(k, v any) bool { rep.startErrs[k.(string)] = v.(interface{ Load() int64 }).Load(); return true })
	rep.decided, rep.decideErrs = dec.snapshot()
	rep.faults, rep.faultErrs, rep.kills = fx.snapshot()
	rep.clientLog = redisLog.n.Load()

	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer ccancel()
	// The consumers drain once the last acks are in.
	var err error
	if rep.Queue, err = fleetcheck.WaitDrained(cctx, f.JS, 30*time.Second, 500*time.Millisecond); err != nil {
		t.Errorf("read the consumers: %v", err)
	}
	if rep.Report, err = check(cctx, f, runs); err != nil {
		t.Fatalf("check: %v", err)
	}
	scanLogs(f, rep)
	for _, n := range f.NATS.Nodes {
		rep.exits = append(rep.exits, n.Exits()...)
	}
	for _, n := range f.Redis.Nodes {
		rep.exits = append(rep.exits, n.Exits()...)
	}

	var b strings.Builder
	rep.print(&b)
	fmt.Print(b.String())
	_ = os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(b.String()), 0o644)
	if rep.failed() {
		t.Errorf("the fleet broke an invariant: see the summary above (logs in %s; DURABLE_FLEET_KEEP=1 keeps them)", dir)
	}
}

// countLogger counts go-redis's log lines.
type countLogger struct{ n atomic.Int64 }

func (l *countLogger) Printf(context.Context, string, ...any) { l.n.Add(1) }

// finished returns the runs of ids that have ended, reading them 16 at a
// time (a read of a run whose Redis primary is down waits for retries).
func finished(ctx context.Context, f *Fleet, ids map[string]bool) []string {
	var (
		mu   sync.Mutex
		out  []string
		wg   sync.WaitGroup
		work = make(chan string)
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				run, err := f.Store.GetRun(cctx, id)
				cancel()
				if err == nil && run.Status.Terminal() {
					mu.Lock()
					out = append(out, id)
					mu.Unlock()
				}
			}
		}()
	}
	for id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return out
}
