package cli_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
)

// --replicas N on a server that is not clustered can never work: the
// services say so and stop (exit 2) instead of retrying forever, whether
// the KV bucket, the blob bucket or the streams come first.
func TestReplicasNeedACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	clearConnEnv(t)
	n := testenv.StartNATS(t)
	r := testenv.StartRedis(t)
	for _, args := range [][]string{
		{"worker", "--nats", n.URL, "--replicas", "3"},                   // KV bucket
		{"worker", "--nats", n.URL, "--redis", r.URL, "--replicas", "3"}, // blob bucket, then streams
		{"scheduler", "--nats", n.URL, "--redis", r.URL, "--replicas", "3"},
		{"approver", "--nats", n.URL, "--replicas", "3", "--tokens", writeTokens(t), "--http", "127.0.0.1:0"},
		{"runs", "list", "--nats", n.URL, "--replicas", "3"},
	} {
		start := time.Now()
		res := runCLI(args...)
		if res.code != 2 || !strings.Contains(res.stderr, "not clustered") || !strings.Contains(res.stderr, "--replicas 1") {
			t.Errorf("durable %s: want exit 2 saying the server is not clustered, got %s", strings.Join(args, " "), res)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("durable %s took %s to give up", args[0], d)
		}
	}
	t.Setenv("DURABLE_REPLICAS", "3")
	if res := runCLI("runs", "list", "--nats", n.URL); res.code != 2 || !strings.Contains(res.stderr, "not clustered") {
		t.Errorf("DURABLE_REPLICAS=3: want exit 2, got %s", res)
	}
	t.Setenv("DURABLE_REPLICAS", "0")
	if res := runCLI("runs", "list", "--nats", n.URL); res.code != 2 || !strings.Contains(res.stderr, "DURABLE_REPLICAS") {
		t.Errorf("DURABLE_REPLICAS=0: want exit 2, got %s", res)
	}
}

func writeTokens(t *testing.T) string {
	t.Helper()
	path := t.TempDir() + "/tokens.json"
	if res := runCLI("token", "create", "--file", path, "--id", "t", "--groups", "adjusters"); res.code != 0 {
		t.Fatalf("token create: %s", res)
	}
	return path
}

// On a three-node JetStream cluster, a worker with --replicas 3 creates the
// streams, the KV bucket of the checkpoint store and the blob bucket at R3
// (the consumers follow their stream); a service that finds a stream with
// fewer replicas than asked says how to raise it and leaves it as it is.
func TestReplicasOnNATSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a NATS cluster")
	}
	clearConnEnv(t)
	nc := fleet.StartNATSCluster(t, t.TempDir(), 3)
	url := nc.URL()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var werr testenv.Buffer
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := cli.RunWorker(ctx, []string{"--nats", url, "--replicas", "3", "--ack-wait", "2s"}, &werr, cli.ReferenceWorkflows); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	conn, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	// A command run before the worker's new bucket has elected its leader
	// waits out the store's timeout (TestKVStoreReadsWithoutLeaderGiveUp
	// in internal/test/fleet); the bucket gets its leader first.
	testenv.Eventually(t, 30*time.Second, "the KV bucket created by the worker, with a leader", func() bool {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		st, err := js.Stream(sctx, "KV_durable")
		return err == nil && st.CachedInfo().Cluster != nil && st.CachedInfo().Cluster.Leader != ""
	})
	var res result
	testenv.Eventually(t, 30*time.Second, "a claim started on the cluster", func() bool {
		res = runCLIWithin(t, 20*time.Second, "start", "claim", "--id", "claim-r3", "--nats", url, "--replicas", "3")
		return res.code == 0
	})
	testenv.Eventually(t, 20*time.Second, "claim-r3 parked", func() bool {
		res = runCLIWithin(t, 20*time.Second, "runs", "list", "--status", "waiting", "--nats", url)
		return res.code == 0 && strings.Contains(res.stdout, "claim-r3")
	})

	for _, name := range []string{queue.StepStream, queue.DLQStream, queue.EventStream, "KV_durable", "OBJ_DURABLE_BLOBS"} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		if got := st.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, got)
		}
	}
	c, err := js.Consumer(ctx, queue.StepStream, queue.ConsumerName("claim"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || len(info.Cluster.Replicas)+1 != 3 {
		t.Errorf("consumer %s: %d peers (err %v), want 3", queue.ConsumerName("claim"), len(info.Cluster.Replicas)+1, err)
	}

	// The event stream made again at R1 by hand: a scheduler asked for
	// R3 warns and leaves it.
	if err := js.DeleteStream(ctx, queue.EventStream); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, queue.EventStreamConfig(queue.Config{Replicas: 1})); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	var serr testenv.Buffer
	sdone := make(chan error, 1)
	t.Setenv("DURABLE_REPLICAS", "3")
	go func() { sdone <- cli.RunScheduler(sctx, []string{"--nats", url}, &serr) }()
	testenv.Eventually(t, 20*time.Second, "the scheduler's warning", func() bool {
		return strings.Contains(serr.String(), "stream DURABLE_EVENTS has 1 replica(s), fewer than --replicas 3")
	})
	scancel()
	if err := <-sdone; err != nil {
		t.Errorf("scheduler: %v", err)
	}
	if !strings.Contains(serr.String(), "nats stream edit DURABLE_EVENTS --replicas 3") {
		t.Errorf("the warning does not say how to raise the replicas:\n%s", serr.String())
	}
	if st, err := js.Stream(ctx, queue.EventStream); err != nil || st.CachedInfo().Config.Replicas != 1 {
		t.Errorf("the scheduler changed the event stream (err %v)", err)
	}
}

// runCLIWithin is runCLI that fails the test when the command has not
// returned within d, instead of hanging the suite.
func runCLIWithin(t *testing.T, d time.Duration, args ...string) result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- runCLI(args...) }()
	select {
	case r := <-done:
		return r
	case <-time.After(d):
		t.Fatalf("durable %s still running after %s", strings.Join(args, " "), d)
		return result{}
	}
}
