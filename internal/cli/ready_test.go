package cli_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/test/testenv"
)

// The worker's /readyz follows its NATS connection: ready once connected,
// 503 naming nats while the server is down, ready again after it is back.
// /healthz stays 200 throughout (liveness must not restart a worker for a
// broker outage).
func TestWorkerReadinessFollowsNATS(t *testing.T) {
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_CRASH"} {
		t.Setenv(k, "")
	}
	n := testenv.StartNATSServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.RunWorker(ctx, []string{"--nats", n.URL, "--ack-wait", "2s", "--metrics", addr}, io.Discard, cli.ReferenceWorkflows)
	}()
	defer func() {
		cancel()
		<-done
	}()
	probe := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 20*time.Second, "ready", func() bool { code, _ := probe("/readyz"); return code == 200 })
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "not ready while NATS is down", func() bool {
		code, body := probe("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"nats"`)
	})
	if code, body := probe("/healthz"); code != 200 {
		t.Fatalf("healthz %d %s while NATS is down", code, body)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "ready again", func() bool { code, _ := probe("/readyz"); return code == 200 })
}
