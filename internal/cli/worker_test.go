package cli_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
)

// The worker command runs the reference workflows against the stores the
// CLI uses and stops cleanly when its context ends.
func TestWorkerCommand(t *testing.T) {
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_CRASH"} {
		t.Setenv(k, "")
	}
	n := testenv.StartNATS(t)
	for _, args := range [][]string{
		{"worker", "--ack-wait", "100ms"},
		{"worker", "--concurrency", "-1"},
		{"worker", "extra"},
	} {
		if r := runCLI(append(args, "--nats", n.URL)...); r.code != 2 {
			t.Errorf("durable %q: want exit 2, got %s", args, r)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.RunWorker(ctx, []string{"--nats", n.URL, "--ack-wait", "2s"}, io.Discard, cli.ReferenceWorkflows)
	}()
	// Closed once RunWorker has returned, whoever received its result.
	exited := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-done:
		}
	})
	const id = "claim-w"
	var r result
	testenv.Eventually(t, 10*time.Second, "claim registered by the worker", func() bool {
		r = runCLI("start", "claim", "--id", id, "--nats", n.URL)
		return r.code == 0
	})
	testenv.Eventually(t, 10*time.Second, id+" parked", func() bool {
		r = runCLI("runs", "list", "--status", "waiting", "--nats", n.URL)
		return r.code == 0 && strings.Contains(r.stdout, id)
	})
	cancel()
	select {
	case err := <-done:
		close(exited)
		if err != nil {
			t.Errorf("worker command after its context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker command did not stop within 10s of its context ending")
	}
}

// A stopping worker should leave at once, even in the middle of a fetch
// waiting on an idle consumer, so that SIGTERM on `durable worker` and
// `durable dev` is prompt. Each try starts a fresh server and cancels once
// every consumer has a pull request of the worker waiting on it: a fetch
// has just begun, and a worker that let it run out would take its whole
// wait (about 1s) to stop.
func TestWorkerCommandStopsPromptly(t *testing.T) {
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_CRASH"} {
		t.Setenv(k, "")
	}
	// What stopping takes once the fetch is interrupted (draining the
	// connection, closing the store) is a few ms; the margin is for -race
	// on a busy 2-core machine.
	const limit = 500 * time.Millisecond
	want := len(cli.ReferenceWorkflows().Names())
	for i := range 8 {
		n := testenv.StartNATS(t)
		_, js := n.Connect(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var log testenv.Buffer
		go func() {
			done <- cli.RunWorker(ctx, []string{"--nats", n.URL, "--ack-wait", "2s"}, &log, cli.ReferenceWorkflows)
		}()
		testenv.Eventually(t, 10*time.Second, "a pull request of the worker waiting on every consumer", func() bool {
			return pullsWaiting(js) == want
		})
		t0 := time.Now()
		cancel()
		err := <-done
		d := time.Since(t0)
		if err != nil {
			t.Fatalf("try %d: worker command after its context ended: %v", i+1, err)
		}
		if d > limit {
			t.Fatalf("try %d: worker took %s to stop, want at most %s", i+1, d, limit)
		}
		// An interrupted fetch is a stop, not a failure to pull.
		if out := log.String(); strings.Contains(out, "pulling steps failed") {
			t.Fatalf("try %d: the stop was logged as a failed pull:\n%s", i+1, out)
		}
		t.Logf("try %d: stopped in %s", i+1, d)
	}
}

// pullsWaiting is the number of the step stream's consumers with a pull
// request waiting on them.
func pullsWaiting(js jetstream.JetStream) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, queue.StepStream)
	if err != nil {
		return 0
	}
	waiting := 0
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.NumWaiting > 0 {
			waiting++
		}
	}
	if lister.Err() != nil {
		return 0
	}
	return waiting
}
