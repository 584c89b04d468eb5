package worker_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Issue 23 item 12: branches count in the crash signals as steps do. Of a
// fan-out of three branches, branch 1's first delivery hangs past its ack
// wait (a resume), branches 2 and 3 fail after paying (their retries
// replay the payment from the journal), and every branch records one more
// effect under a key they share (a bug in how keys are chosen). The
// worker's /metrics, `durable stats` and its reused-key check see all of
// it.
func TestBranchCrashSignals(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ctx := context.Background()
			var mu sync.Mutex
			failed := map[int]bool{}
			wf := steps.New[num]("sig", 1)
			join := wf.Ref("join")
			pay := steps.AddBranch(wf, "pay", func(ctx context.Context, s *steps.Context, i int) (int, error) {
				out, err := steps.Effect(ctx, s, "pay", i, func(context.Context, string) (int, error) { return i, nil })
				if err != nil {
					return 0, err
				}
				mu.Lock()
				first := !failed[i]
				failed[i] = true
				mu.Unlock()
				if i > 1 && first {
					return 0, errors.New("ledger hiccup after the payment")
				}
				s.RecordEffect("sig-1:receipt", false)
				return out, nil
			}, steps.WithRetry(steps.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond}))
			wf.
				Step("split", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.FanOut(join, st, pay.With(1), pay.With(2), pay.With(3)), nil
				}).
				Step("join", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			m := metrics.New()
			srv := httptest.NewServer(metrics.Mux(m))
			t.Cleanup(srv.Close)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) {
				c.Metrics = m
				c.AckWait = time.Second
				c.Hooks = append(c.Hooks, worker.HookFunc(func(ctx context.Context, b worker.Boundary, d worker.Delivery) {
					if b != worker.Received || d.RunID != "sig-1" || d.Branch != 1 || d.Attempt != 1 {
						return
					}
					// Hung past the ack wait: the server delivers the branch
					// again; this delivery goes on once that one committed.
					testenv.Eventually(t, 20*time.Second, "branch 1 committed by its redelivery", func() bool {
						done, err := f.Store.BranchCheckpoints(ctx, "sig-1", 2, 3)
						return err == nil && len(done) > 0 && done[0].Branch == 1
					})
				}))
			})
			f.Start("sig", "sig-1", "")
			f.WaitStatus("sig-1", checkpoint.StatusCompleted, 30*time.Second)

			var problems []string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				got := scrapeMetrics(t, srv.URL)
				problems = nil
				for series, want := range map[string]string{
					`durable_resumes_total{workflow="sig"}`:                        "1",
					`durable_idempotency_replays_total{tool="pay",workflow="sig"}`: "2",
				} {
					if got[series] != want {
						problems = append(problems, fmt.Sprintf("%s = %q, want %s", series, got[series], want))
					}
				}
				if len(problems) == 0 || time.Now().After(deadline) {
					break
				}
			}
			st, err := f.Client.Stats(ctx, client.StatsOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d, r := st.Duplicates, st.Resumes
			if d.Effects != 6 || d.Replayed != 2 || d.ReusedKeys != 1 || r.RedeliveredSteps != 3 || r.CompletedRuns != 1 {
				problems = append(problems, fmt.Sprintf("stats: %d effects, %d replayed, %d reused keys %v; %d redelivered steps over %d completed runs; want 6, 2, 1 [sig-1:receipt]; 3 over 1",
					d.Effects, d.Replayed, d.ReusedKeys, d.ReusedKeyExamples, r.RedeliveredSteps, r.CompletedRuns))
			}
			if len(problems) > 0 {
				t.Fatal(strings.Join(problems, "; "))
			}
		})
	}
}

// scrapeMetrics reads the Prometheus text at base/metrics: series → value.
func scrapeMetrics(t *testing.T, base string) map[string]string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			out[line[:i]] = line[i+1:]
		}
	}
	return out
}
