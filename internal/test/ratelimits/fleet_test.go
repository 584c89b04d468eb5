package ratelimits

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/internal/test/ratelimits/askflow"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

// fleetRuns is how many runs the fleet test starts: more than 30 s at
// 10/s and the slow-downs take, so that the workers always have steps
// waiting for tokens.
const fleetRuns = 480

// TestRateLimitFleet is issue 27's rate-limit acceptance at process
// level, on each store: three askworker processes (8 steps at once
// each), a limit of 10/s burst 5 set with `durable limit set`, 480 runs
// whose step calls the fake provider through model.Call with
// steps.Resource("model"). The rate the provider sees over 30 s (from
// 1 s after its first request) must be within 10 % of 10/s; then the
// provider twice answers 429 with Retry-After: 2 (and goes on answering
// 429 for those 2 s): each time the fleet must make no request for 2 s
// after the first 429, with fewer 429s than workers. Every run must
// complete, none retried.
func TestRateLimitFleet(t *testing.T) {
	if os.Getenv("DURABLE_RATELIMITS") == "" {
		t.Skip("a minute of wall clock: run with DURABLE_RATELIMITS=1 go test -run TestRateLimitFleet ./internal/test/ratelimits (make ratelimits)")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each store has its own servers, provider and workers
			d := deployFleet(t, kind)
			d.startRuns()
			d.checkRate()
			for k := range 2 {
				refused, quiet := d.p.slowDown(t, 2*time.Second)
				t.Logf("%s: slow-down %d: %d 429s, then no request for %s", kind, k+1, refused, quiet.Round(time.Millisecond))
				if refused >= len(d.workers) || quiet < 1950*time.Millisecond {
					t.Errorf("slow-down %d: %d 429s (want fewer than the %d workers), next request %s after the first 429 (want 2s)", k+1, refused, len(d.workers), quiet)
				}
			}
			d.checkRuns()
			d.checkMetrics()
		})
	}
}

// fleetDeployment is one store's servers, the provider and the workers.
type fleetDeployment struct {
	t       *testing.T
	kind    string
	dir     string
	conn    []string // connection flags of every command
	env     []string
	client  *client.Client
	p       *provider
	workers []*fleet.Service
}

// deployFleet starts nats-server (and redis-server) processes, the
// provider, sets the limit with the durable CLI and starts three workers.
func deployFleet(t *testing.T, kind string) *fleetDeployment {
	t.Helper()
	d := &fleetDeployment{t: t, kind: kind, dir: t.TempDir(), p: startProvider(t)}
	n := testenv.StartNATSServer(t)
	_, js := n.Connect(t)
	d.conn = []string{"--nats", n.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var store checkpoint.Store
	switch kind {
	case "redis":
		r := testenv.StartRedisServer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		store = redisstore.New(rdb, redisstore.Options{})
		d.conn = append(d.conn, "--redis", "redis://"+r.Addr)
	default:
		st, err := kvstore.New(ctx, js, kvstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		store = st
	}
	d.client = client.New(js, store)
	d.env = []string{"DURABLE_LOG_LEVEL=info", "ASK_PROVIDER_URL=" + d.p.URL,
		"DURABLE_NATS_URL=", "DURABLE_REDIS_URL=", "DURABLE_KV_BUCKET=", "DURABLE_REPLICAS="}
	d.durable("limit", "set", askflow.Resource, "--rate", "10/s", "--burst", "5", "--by", "ratelimits-test")
	bin := testenv.Binary(t, "github.com/durable-run/durable/internal/test/ratelimits/askworker")
	for i := range 3 {
		d.workers = append(d.workers, d.worker(bin, i+1))
	}
	for _, w := range d.workers {
		if err := w.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitWorkflows(t, store, 30*time.Second, askflow.Name)
	return d
}

// worker starts askworker process i, stopped at cleanup.
func (d *fleetDeployment) worker(bin string, i int) *fleet.Service {
	d.t.Helper()
	port, err := proc.FreePort(0)
	if err != nil {
		d.t.Fatal(err)
	}
	s := &fleet.Service{Metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	args := slices.Concat(d.conn, []string{"--ack-wait", "5s", "--concurrency", "8", "--drain-timeout", "1s", "--metrics", s.Metrics})
	s.Proc = proc.New(proc.Config{Name: fmt.Sprintf("worker-%d", i), Path: bin, Args: args, Env: d.env, Dir: d.dir})
	d.t.Cleanup(func() { _ = s.Stop(10 * time.Second) })
	if err := s.Start(); err != nil {
		d.t.Fatal(err)
	}
	return s
}

// durable runs the durable CLI with the connection flags; it must exit 0.
func (d *fleetDeployment) durable(args ...string) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.DurableBin(d.t), slices.Concat(args, d.conn)...)
	cmd.Env = append(os.Environ(), d.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		d.t.Fatalf("durable %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (d *fleetDeployment) startRuns() {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range fleetRuns {
		if _, _, err := d.client.Start(ctx, client.StartRequest{Workflow: askflow.Name, RunID: runID(i)}); err != nil {
			d.t.Fatal(err)
		}
	}
}

func runID(i int) string { return fmt.Sprintf("ask-%03d", i) }

// checkRate: over 30 s from 1 s after the first request (the burst
// spent), the provider answered 10/s within 10 %.
func (d *fleetDeployment) checkRate() {
	d.t.Helper()
	testenv.Eventually(d.t, 30*time.Second, "the provider's first request", func() bool { n, _, _, _ := d.p.counts(); return n > 0 })
	_, first, _, _ := d.p.counts()
	from, to := first.Add(time.Second), first.Add(31*time.Second)
	time.Sleep(time.Until(to) + 100*time.Millisecond)
	n := d.p.answered(from, to)
	rate := float64(n) / 30
	d.t.Logf("%s: %d requests in 30 s: %.2f/s (limit 10/s burst 5); %d in the first second", d.kind, n, rate, d.p.answered(first, from))
	if math.Abs(rate-10) > 1 {
		d.t.Errorf("observed %.2f/s over 30 s, want 10/s within 10 %%", rate)
	}
}

// checkRuns: every run completed (one attempt each: a retry would have
// dead-lettered it).
func (d *fleetDeployment) checkRuns() {
	d.t.Helper()
	testenv.Eventually(d.t, 2*time.Minute, "every run's call answered", func() bool { n, _, _, _ := d.p.counts(); return n >= fleetRuns })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range fleetRuns {
		testenv.Eventually(d.t, 20*time.Second, runID(i)+" completed", func() bool {
			run, err := d.client.Store().GetRun(ctx, runID(i))
			if err == nil && run.Status != checkpoint.StatusRunning && run.Status != checkpoint.StatusCompleted {
				d.t.Fatalf("run %s is %s: %s", run.ID, run.Status, run.Error)
			}
			return err == nil && run.Status == checkpoint.StatusCompleted
		})
	}
}

// checkMetrics sums the workers' flow metrics: as many slow-downs as
// 429s, no step retried.
func (d *fleetDeployment) checkMetrics() {
	d.t.Helper()
	sum := map[string]float64{}
	for _, w := range d.workers {
		for k, v := range scrape(d.t, w.Metrics) {
			sum[k] += v
		}
	}
	_, _, _, refused := d.p.counts()
	d.t.Logf("%s: workers' metrics: %v", d.kind, sum)
	if int(sum["durable_flow_slowdowns_total"]) != len(refused) {
		d.t.Errorf("durable_flow_slowdowns_total %v, want the %d 429s", sum["durable_flow_slowdowns_total"], len(refused))
	}
	if sum["retry"] != 0 || sum["dead"] != 0 || sum["durable_flow_throttled_total"] == 0 {
		d.t.Errorf("steps retried %v, dead %v, throttled calls %v: want 0, 0 and some", sum["retry"], sum["dead"], sum["durable_flow_throttled_total"])
	}
}

// scrape reads a worker's /metrics: the flow series summed by name, and
// the steps' outcomes by outcome.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		series, value, ok := strings.Cut(sc.Text(), " ")
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil || strings.HasPrefix(series, "#") {
			continue
		}
		name, labels, _ := strings.Cut(series, "{")
		switch {
		case strings.HasPrefix(name, "durable_flow_"):
			out[name] += v
			if strings.Contains(labels, `how="handed_back"`) {
				out[name+"{handed_back}"] += v
			}
		case name == "durable_steps_total":
			_, outcome, _ := strings.Cut(labels, `outcome="`)
			outcome, _, _ = strings.Cut(outcome, `"`)
			out[outcome] += v
		}
	}
	return out
}
