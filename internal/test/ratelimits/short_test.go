package ratelimits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/ratelimits/askflow"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/model/anthropic"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// The acceptance's properties, loosely, in a few seconds: three
// in-process workers, each with its own Limiter, call the provider at
// about 10/s (burst 5), and one 429 with Retry-After: 1 stops every
// call for about a second, with fewer 429s than workers. One store:
// the limits live in NATS whatever the checkpoint store.
func TestRateLimitShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts NATS and three workers")
	}
	f := testfleet.New(t, "kv")
	p := startProvider(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	limits, err := flow.NewStore(ctx, f.JS, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := limits.Set(ctx, askflow.Resource, flow.Rate{N: 10, Per: time.Second, Burst: 5}, "test"); err != nil {
		t.Fatal(err)
	}
	m, err := anthropic.New(anthropic.Options{APIKey: "test-key", Model: "claude-test", BaseURL: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	reg := steps.NewRegistry().MustRegister(askflow.Workflow(m))
	for range 3 {
		f.StartWorker(reg, func(c *worker.Config) { c.Flow, c.Concurrency = limits, 4 })
	}
	const runs = 60
	started := time.Now()
	for i := range runs {
		f.Start(askflow.Name, fmt.Sprintf("ask-%03d", i), `{}`)
	}
	testenv.Eventually(t, 20*time.Second, "the first answers", func() bool { n, _, _, _ := p.counts(); return n >= 10 })
	_, first, _, _ := p.counts()
	time.Sleep(time.Until(first.Add(3 * time.Second)))
	// Burst 5, then 10/s: about 35 in the 3 s from the first call.
	if n := p.answered(first, first.Add(3*time.Second)); n < 28 || n > 38 {
		t.Errorf("%d calls in the first 3 s, want 35 (burst 5, then 10/s) within 20 %%", n)
	}
	refused, quiet := p.slowDown(t, time.Second)
	t.Logf("one overload of 1s: %d 429s, then no call for %s", refused, quiet)
	if refused >= 3 || quiet < 900*time.Millisecond {
		t.Errorf("after a 429 with Retry-After 1: %d 429s (want fewer than the 3 workers) and the next call %s later (want 1s)", refused, quiet)
	}
	for i := range runs {
		f.WaitStatus(fmt.Sprintf("ask-%03d", i), checkpoint.StatusCompleted, 30*time.Second)
	}
	checkTokenWaits(t, f, runs, time.Since(started))
}

// checkTokenWaits checks what the runs' checkpoints say they waited for
// tokens, all started together, the last one done within elapsed: 60
// calls at burst 5 then 10/s, and a slow-down, wait 5.5 s and more in
// all for the last ones; none waits longer than the whole.
func checkTokenWaits(t *testing.T, f *testfleet.Fleet, runs int, elapsed time.Duration) {
	t.Helper()
	var waited, longest time.Duration
	var n int
	for i := range runs {
		cp := f.Checkpoints(fmt.Sprintf("ask-%03d", i))[0]
		if cp.TokenWaitMS == 0 {
			continue
		}
		d := time.Duration(cp.TokenWaitMS * float64(time.Millisecond))
		if cp.TokenResource != askflow.Resource || d > elapsed {
			t.Errorf("ask-%03d says it waited %s for tokens of %q; want %s, within the %s the runs took", i, d, cp.TokenResource, askflow.Resource, elapsed)
		}
		n, waited, longest = n+1, waited+d, max(longest, d)
	}
	t.Logf("%d of %d runs waited for tokens: %s in all, %s at most (all done in %s)", n, runs, waited.Round(time.Millisecond), longest.Round(time.Millisecond), elapsed.Round(time.Millisecond))
	if n < runs-10 || longest < 5*time.Second {
		t.Errorf("%d of %d runs say they waited for tokens, the longest %s; want all but the burst's and the first ones, and 5.5s at least for the last", n, runs, longest)
	}
}
