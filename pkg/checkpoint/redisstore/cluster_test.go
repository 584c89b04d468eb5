package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/redis/go-redis/v9"
)

// The conformance suite on a three-node Redis Cluster: a script touching
// keys of two slots fails there with CROSSSLOT, which a single server
// never reports.
func TestClusterConformance(t *testing.T) {
	client := startCluster(t, 3)
	checkpointtest.Run(t, func(t *testing.T) checkpoint.Store {
		return redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
	})
}

// startCluster starts n redis-server nodes in cluster mode, splits the
// 16384 slots between them and returns a cluster client.
func startCluster(t *testing.T, n int) *redis.ClusterClient {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs redis-server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	addrs := make([]string, n)
	nodes := make([]*redis.Client, n)
	for i := range n {
		port := clusterPort(t)
		testenv.StartRedis(t, "--port", strconv.Itoa(port), "--cluster-enabled", "yes",
			"--cluster-node-timeout", "5000")
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", port)
		nodes[i] = redis.NewClient(&redis.Options{Addr: addrs[i]})
		t.Cleanup(func() { _ = nodes[i].Close() })
	}
	for i, node := range nodes {
		if i > 0 {
			host, port, _ := net.SplitHostPort(addrs[i])
			p, _ := strconv.Atoi(port)
			if err := nodes[0].ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
				t.Fatalf("cluster meet %s: %v", addrs[i], err)
			}
		}
		lo, hi := i*16384/n, (i+1)*16384/n-1
		if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("add slots %d-%d to %s: %v", lo, hi, addrs[i], err)
		}
	}
	testenv.Eventually(t, 20*time.Second, "redis cluster state ok on every node", func() bool {
		for _, node := range nodes {
			info, err := node.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				return false
			}
		}
		return true
	})
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	testenv.Eventually(t, 10*time.Second, "cluster client sees the cluster", func() bool {
		return client.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}) == nil
	})
	return client
}

// clusterPort finds a free port whose cluster bus port (port+10000) is
// free as well.
func clusterPort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}
