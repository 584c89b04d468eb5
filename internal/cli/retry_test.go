package cli_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// A worker started before NATS is up waits for it instead of exiting:
// fleets start in any order, and a restart of NATS must not stop workers.
func TestWorkerWaitsForNATS(t *testing.T) {
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_CRASH"} {
		t.Setenv(k, "")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.RunWorker(ctx, []string{"--nats", url, "--ack-wait", "2s"}, io.Discard, cli.ReferenceWorkflows)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	select {
	case err := <-done:
		t.Fatalf("worker exited while NATS was away: %v", err)
	case <-time.After(3 * time.Second):
	}
	n := testenv.StartNATSAt(t, t.TempDir(), port)
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the worker registered its workflows", func() bool {
		st, err := kvstore.New(context.Background(), js, kvstore.Options{})
		if err != nil {
			return false
		}
		infos, err := st.Workflows(context.Background())
		return err == nil && len(infos) >= 2
	})
}
