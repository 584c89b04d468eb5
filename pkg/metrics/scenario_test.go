package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/schedulercmd"
	"github.com/durable-run/durable/pkg/steps"
)

// The test binary doubles as a worker binary (the way users write theirs:
// the reference workflows plus two probes), so that crashes kill a real
// process.
func TestMain(m *testing.M) {
	if os.Getenv("DURABLE_METRICS_CHILD") == "worker" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := cli.RunWorker(ctx, os.Args[1:], os.Stderr, probeWorkflows); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type probeState struct {
	N int `json:"n"`
}

// probeWorkflows: "mismatch" journals a call, fails, and on its retry makes
// the call again with other arguments (steps.ErrJournalMismatch); "conflict"
// pays with its step's key through the counted transport and fails the run
// when the provider refuses the key.
func probeWorkflows() *steps.Registry {
	pay := payments.Client{BaseURL: os.Getenv("DURABLE_PAYMENTS_URL"), HTTP: &http.Client{Transport: metrics.Default().Transport("payments", nil)}}
	mismatch := steps.New[probeState]("mismatch", 1).
		Step("lookup", func(ctx context.Context, s *steps.Context, st probeState) (steps.Outcome[probeState], error) {
			if _, err := steps.Call(ctx, s, "lookup", s.Attempt(), func(context.Context) (int, error) { return 1, nil }); err != nil {
				return steps.Outcome[probeState]{}, err
			}
			return steps.Outcome[probeState]{}, errors.New("transient: try again")
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 3, Backoff: 50 * time.Millisecond}))
	conflict := steps.New[probeState]("conflict", 1).
		Step("pay", func(ctx context.Context, s *steps.Context, st probeState) (steps.Outcome[probeState], error) {
			_, _, err := pay.Pay(ctx, s.IdempotencyKey(), payments.PayRequest{RunID: s.RunID(), Amount: 100, Currency: "EUR", Payee: "p"})
			if errors.Is(err, payments.ErrConflict) {
				return steps.Fail(st, err.Error()), nil
			}
			if err != nil {
				return steps.Outcome[probeState]{}, err
			}
			return steps.Complete(st), nil
		})
	return cli.ReferenceWorkflows().MustRegister(mismatch, conflict)
}

// TestScenarioMetrics: one crash-and-resume after a payment (replayed by
// the provider), one step hung past its ack wait and resumed, one key
// replayed with a different payload (refused by the provider), one journal
// mismatch (dead letter), one expired wait, one stuck run; then each metric
// on the worker's and the scheduler's /metrics moved by what happened.
func TestScenarioMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	dir := t.TempDir()
	nats := testenv.StartNATS(t)
	_, js := nats.Connect(t)
	r := testenv.StartRedis(t)
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb, redisstore.Options{})
	cl := client.New(js, store)
	ctx := context.Background()

	pay, err := payments.Open(filepath.Join(dir, "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	payURL := serve(t, http.StripPrefix("/demo/payments", pay.Handler())) + "/demo/payments"
	t.Cleanup(func() { _ = pay.Close() })

	worker := func(name, crash, metricsAddr string) *exec.Cmd {
		args := []string{"--nats", nats.URL, "--redis", r.URL, "--ack-wait", "2s", "--concurrency", "4", "--drain-timeout", "1s"}
		if metricsAddr != "" {
			args = append(args, "--metrics", metricsAddr)
		}
		cmd := exec.Command(os.Args[0], args...)
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "DURABLE_METRICS_CHILD=worker", "DURABLE_CRASH="+crash, "DURABLE_PAYMENTS_URL="+payURL, "DURABLE_LOG_LEVEL=warn")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = logf.Close() })
		return cmd
	}
	start := func(wf, id, input string) {
		t.Helper()
		if _, _, err := cl.Start(ctx, client.StartRequest{Workflow: wf, RunID: id, Input: []byte(input)}); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
	}
	waitStatus := func(id string, want checkpoint.Status, timeout time.Duration) {
		t.Helper()
		testenv.Eventually(t, timeout, id+" "+string(want), func() bool {
			run, err := store.GetRun(ctx, id)
			return err == nil && run.Status == want
		})
	}

	// 1. Worker A alone pays for m-pay at step 6 and dies before the
	// payment is journaled.
	a := worker("worker-a", "m-pay:6:after-effect", "")
	testenv.Eventually(t, 60*time.Second, "workflows registered", func() bool {
		infos, err := store.Workflows(ctx)
		return err == nil && len(infos) >= 4
	})
	start("claim", "m-pay", `{"amount": 500}`)
	if err := a.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("worker A should have been killed at m-pay:6, got %v", err)
	}

	// 2. Worker B (scraped) resumes m-pay (the provider replays the key),
	// hangs in m-hang's step 2 and resumes it after the ack wait, gets the
	// conflicting key refused, and dead-letters the journal mismatch.
	wAddr := freeAddr(t)
	worker("worker-b", "m-hang:2:hang", wAddr)
	waitStatus("m-pay", checkpoint.StatusCompleted, 30*time.Second)
	start("claim", "m-hang", `{"amount": 500}`)
	waitStatus("m-hang", checkpoint.StatusCompleted, 30*time.Second)
	// The same key the conflict run will use, paid before with another body.
	if _, _, err := (payments.Client{BaseURL: payURL}).Pay(ctx, "m-conflict:step1", payments.PayRequest{RunID: "m-conflict", Amount: 999, Currency: "EUR", Payee: "p"}); err != nil {
		t.Fatal(err)
	}
	start("conflict", "m-conflict", "")
	waitStatus("m-conflict", checkpoint.StatusFailed, 30*time.Second)
	start("mismatch", "m-mismatch", "")
	waitStatus("m-mismatch", checkpoint.StatusDead, 30*time.Second)

	// 3. A wait past its TTL and a stuck run (running, its message lost),
	// seen by the fleet scan before any scheduler sweeps.
	start("claim", "m-wait", `{"amount": 1840, "approval_ttl": "1s"}`)
	waitStatus("m-wait", checkpoint.StatusWaiting, 30*time.Second)
	old := time.Now().UTC().Add(-time.Hour)
	if _, err := store.CreateRun(ctx, checkpoint.Run{ID: "m-stuck", Workflow: "claim", Version: 1, Status: checkpoint.StatusRunning,
		Step: 1, StepName: "receive", Input: []byte(`{"amount": 500}`), CreatedAt: old, UpdatedAt: old}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the wait's TTL passes
	sm := metrics.New()
	fleet, err := sm.NewFleet(metrics.FleetConfig{Store: store, JetStream: js, StuckMin: time.Second, StuckDefault: time.Minute, PastTTLGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sURL := serve(t, metrics.Mux(sm))
	if err := fleet.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	s := scrape(t, sURL)
	s.want(t, `durable_waits_past_ttl{kind="approval",workflow="claim"}`, 1)
	s.want(t, `durable_runs_stuck{step="receive",workflow="claim"}`, 1)
	s.want(t, `durable_runs{status="running",workflow="claim"}`, 1)
	s.want(t, `durable_runs{status="waiting",workflow="claim"}`, 1)
	s.want(t, `durable_runs{status="completed",workflow="claim"}`, 2)
	s.want(t, `durable_runs{status="failed",workflow="conflict"}`, 1)
	s.want(t, `durable_runs{status="dead",workflow="mismatch"}`, 1)
	s.want(t, `durable_dead_letter_messages`, 1)
	s.want(t, `durable_consumer_pending_messages{consumer="steps-claim"}`, 0) // the stuck run's message is lost: nothing queued

	// 4. A scheduler expires the wait (escalate, then reject) and repairs
	// the stuck run, which then completes on worker B.
	sch, err := scheduler.New(scheduler.Config{Client: cl, Interval: 100 * time.Millisecond, Lease: 5 * time.Second, StuckAfter: 2 * time.Second, StepTimeout: time.Second, RepairInterval: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	schedulercmd.RegisterMetrics(sm, sch.Stats)
	sctx, stopSch := context.WithCancel(ctx)
	schDone := make(chan error, 1)
	go func() { schDone <- sch.Run(sctx) }()
	t.Cleanup(func() { stopSch(); <-schDone })
	waitStatus("m-wait", checkpoint.StatusFailed, 30*time.Second)
	waitStatus("m-stuck", checkpoint.StatusCompleted, 30*time.Second)
	if err := fleet.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	s = scrape(t, sURL)
	s.want(t, `durable_scheduler_expired_waits_total{action="escalated"}`, 1)
	s.want(t, `durable_scheduler_expired_waits_total{action="rejected"}`, 1)
	s.want(t, `durable_scheduler_repairs_total{kind="stuck"}`, 1)
	s.want(t, `durable_waits_past_ttl{kind="approval",workflow="claim"}`, 0)
	s.want(t, `durable_runs_stuck{step="receive",workflow="claim"}`, 0)
	s.want(t, `durable_runs{status="completed",workflow="claim"}`, 3)

	// 5. Worker B's own counters.
	w := scrape(t, "http://"+wAddr)
	w.want(t, `durable_resumes_total{workflow="claim"}`, 2)                        // m-pay at 6, m-hang at 2
	w.want(t, `durable_idempotency_replays_total{tool="pay",workflow="claim"}`, 1) // m-pay's payment, replayed by the provider
	w.want(t, `durable_tool_idempotent_replays_total{tool="payments"}`, 1)         // seen by the transport
	w.want(t, `durable_idempotency_conflicts_total{tool="payments"}`, 1)           // m-conflict
	w.want(t, `durable_journal_mismatches_total{step="lookup",workflow="mismatch"}`, 1)
	w.want(t, `durable_dead_letters_total{step="lookup",workflow="mismatch"}`, 1)
	w.want(t, `durable_steps_total{outcome="retry",step="lookup",workflow="mismatch"}`, 1)
	w.want(t, `durable_steps_total{outcome="failed",step="pay",workflow="conflict"}`, 1)
	w.want(t, `durable_steps_total{outcome="committed",step="pay",workflow="claim"}`, 3) // m-pay, m-hang, m-stuck
	w.want(t, `durable_steps_total{outcome="completed",step="archive",workflow="claim"}`, 3)
	w.want(t, `durable_steps_total{outcome="parked",step="approve-payout",workflow="claim"}`, 1)
	// m-wait's step 5 ran again after the rejection and failed the run.
	w.want(t, `durable_steps_total{outcome="failed",step="approve-payout",workflow="claim"}`, 1)
	// Every checkpoint B committed is in the size histogram: m-pay 6-9,
	// m-hang 2-9, m-stuck 1-9, m-wait 1-5 (step 5 failing the run),
	// m-conflict 1 (failed).
	w.want(t, `durable_checkpoint_size_bytes_count{step="pay",workflow="claim"}`, 3)
	w.want(t, `durable_step_duration_seconds_count{step="pay",workflow="claim"}`, 3)
}

// serve serves h on a loopback port until the test ends and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// samples is one scrape: series (name{labels sorted}) to value.
type samples map[string]float64

func scrape(t *testing.T, base string) samples {
	t.Helper()
	var resp *http.Response
	testenv.Eventually(t, 20*time.Second, "GET "+base+"/metrics", func() bool {
		var err error
		resp, err = http.Get(base + "/metrics")
		return err == nil
	})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s", base, resp.Status)
	}
	out := samples{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

func (s samples) want(t *testing.T, series string, v float64) {
	t.Helper()
	got, ok := s[series]
	if !ok {
		var near []string
		name, _, _ := strings.Cut(series, "{")
		for k := range s {
			if strings.HasPrefix(k, name) {
				near = append(near, k)
			}
		}
		t.Errorf("%s: no such series; have %v", series, near)
		return
	}
	if got != v {
		t.Errorf("%s = %v, want %v", series, got, v)
	}
}
