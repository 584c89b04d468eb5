package cli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/demo/devenv"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/internal/test/testenv"
)

// The store on a Redis Cluster named by a redis+cluster:// URL: a worker
// and the operator commands run claims whose keys spread over the three
// primaries, each paid once. A plain redis:// URL naming a Cluster node,
// and a cluster URL naming a plain server, are refused with what to write.
func TestRedisClusterURL(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a Redis Cluster")
	}
	clearConnEnv(t)
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	de, err := devenv.Start(devenv.Config{Dir: t.TempDir(), NATSPort: -1, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = de.Close() })
	t.Setenv("DURABLE_PAYMENTS_URL", de.PaymentsURL())
	rc := fleet.StartRedisCluster(t, t.TempDir(), fleet.RedisClusterOptions{Primaries: 3})
	conn := []string{"--nats", de.NATSURL, "--redis", rc.URL()}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := cli.RunWorker(ctx, append([]string{"--ack-wait", "2s"}, conn...), io.Discard, cli.ReferenceWorkflows); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	const runs = 12
	for i := range runs {
		id := fmt.Sprintf("claim-rc-%02d", i)
		testenv.Eventually(t, 20*time.Second, "start "+id, func() bool {
			return runCLI(append([]string{"start", "claim", "--id", id, "--input", `{"amount": 500}`}, conn...)...).code == 0
		})
	}
	testenv.Eventually(t, 30*time.Second, "every claim completed", func() bool {
		res := runCLI(append([]string{"runs", "list", "--status", "completed"}, conn...)...)
		return res.code == 0 && strings.Count(res.stdout, "claim-rc-") == runs
	})
	pays, err := payments.Client{BaseURL: de.PaymentsURL()}.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pays) != runs {
		t.Errorf("%d payments for %d claims", len(pays), runs)
	}
	show := runCLI(append([]string{"runs", "show", "claim-rc-03"}, conn...)...)
	if show.code != 0 || !strings.Contains(show.stdout, "completed") {
		t.Errorf("runs show on the cluster: %s", show)
	}
	// The runs' keys live on every primary: the hash tag spreads them.
	primaries, err := rc.Primaries(ctx)
	if err != nil || len(primaries) != 3 {
		t.Fatalf("primaries %v: %v", primaries, err)
	}
	for _, p := range primaries {
		if n, err := p.DBSize(ctx); err != nil || n == 0 {
			t.Errorf("primary %s holds %d keys (err %v): the runs do not spread", p.Name, n, err)
		}
	}

	// redis:// naming one node of the cluster.
	res := runCLI("runs", "list", "--nats", de.NATSURL, "--redis", "redis://"+rc.Nodes[1].Addr)
	if res.code != 2 || !strings.Contains(res.stderr, "is a Redis Cluster node") || !strings.Contains(res.stderr, "redis+cluster://") {
		t.Errorf("redis:// on a cluster node: want exit 2 naming redis+cluster://, got %s", res)
	}
	// redis+cluster:// naming a plain server.
	plain := testenv.StartRedisServer(t)
	res = runCLI("runs", "list", "--nats", de.NATSURL, "--redis", "redis+cluster://"+plain.Addr)
	if res.code != 1 || !strings.Contains(res.stderr, "not in cluster mode") || !strings.Contains(res.stderr, "redis://") {
		t.Errorf("redis+cluster:// on a plain server: want exit 1 saying it is not in cluster mode, got %s", res)
	}
}
