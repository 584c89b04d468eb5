package cli_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/testenv"
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

// A stopping worker should leave at once (after at most the one fetch in
// progress, FetchMaxWait 1s), so that SIGTERM on `durable worker` and
// `durable dev` is prompt.
func TestWorkerCommandStopsPromptly(t *testing.T) {
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_CRASH"} {
		t.Setenv(k, "")
	}
	n := testenv.StartNATS(t)
	for i := range 8 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- cli.RunWorker(ctx, []string{"--nats", n.URL, "--ack-wait", "2s"}, io.Discard, cli.ReferenceWorkflows)
		}()
		// Let it reach its fetch loop.
		testenv.Eventually(t, 10*time.Second, "claim registered", func() bool {
			r := runCLI("start", "nosuch", "--id", "x", "--nats", n.URL)
			return r.code == 2 && strings.Contains(r.stderr, " claim ") && strings.Contains(r.stderr, "refund-agent]")
		})
		t0 := time.Now()
		cancel()
		<-done
		if d := time.Since(t0); d > 1500*time.Millisecond {
			t.Fatalf("try %d: worker took %s to stop, want at most the 1s fetch in progress", i+1, d)
		}
	}
}
