package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// The KV store on a replicated bucket whose stream has no leader (two of
// three NATS nodes down, or a leader election under way): JetStream
// drops the API requests it cannot answer, so a read must give up with an
// error, as the jetstream package's calls do after their default timeout,
// not wait forever on a context without a deadline (every CLI command's).
// Found by TestReplicasOnNATSCluster (`durable start` hung 5 minutes on a
// fresh R3 bucket); fixed in c8a3546 (the store's timeout on every raw
// request).
func TestKVStoreReadsWithoutLeaderGiveUp(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a NATS cluster")
	}
	nc := StartNATSCluster(t, t.TempDir(), 3)
	conn, err := nats.Connect(nc.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "kvleader", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "w", Version: 1, FirstStep: "a", Steps: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	// Two of three nodes down: no quorum, no leader; the client stays
	// connected to the third.
	for _, n := range nc.Nodes {
		if n.URL != conn.ConnectedUrl() {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
			if len(nc.Nodes)-countDown(nc) == 1 {
				break
			}
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Workflows(context.Background()) // as `durable start` calls it
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Workflows answered without a leader")
		}
		t.Logf("gave up: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Workflows still waiting 30s after the bucket lost its leader: a request JetStream drops is never given up")
	}
}

func countDown(c *testenv.NATSCluster) int {
	n := 0
	for _, node := range c.Nodes {
		if !node.Running() {
			n++
		}
	}
	return n
}
