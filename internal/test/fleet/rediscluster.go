package fleet

import (
	"bufio"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
)

// RedisCluster is a Redis Cluster of redis-server processes on loopback:
// primaries that split the 16384 slots, each with its replicas.
type RedisCluster struct {
	Nodes []*RedisNode
}

// RedisNode is one redis-server of the cluster. Kill and Start keep its
// port and data directory (AOF and nodes.conf): a restarted node rejoins.
type RedisNode struct {
	*testenv.RedisServer
	Name string
	ID   string // cluster node id
}

// RedisClusterOptions shapes StartRedisCluster's cluster.
type RedisClusterOptions struct {
	Primaries int // default 3
	Replicas  int // per primary; default 0
	// NodeTimeout is cluster-node-timeout: how long a primary may be
	// unreachable before its replica takes over. Default 2s.
	NodeTimeout time.Duration
}

// StartRedisCluster starts the nodes (testenv.RedisClusterNode) with the
// AOF on (appendfsync everysec, Redis's default), each in dir/redis-rN,
// joins them (CLUSTER MEET), gives each primary its share of the slots
// (CLUSTER ADDSLOTSRANGE), makes the others replicas (CLUSTER REPLICATE),
// and waits until the cluster is ok and every replica is in sync.
func StartRedisCluster(tb testing.TB, dir string, o RedisClusterOptions) *RedisCluster {
	tb.Helper()
	if o.Primaries == 0 {
		o.Primaries = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 2 * time.Second
	}
	c := &RedisCluster{}
	total := o.Primaries * (1 + o.Replicas)
	for i := range total {
		name := fmt.Sprintf("r%d", i+1)
		srv := testenv.StartRedisServer(tb, testenv.RedisClusterNode(o.NodeTimeout), testenv.RedisAOF("everysec"),
			testenv.RedisDir(filepath.Join(dir, "redis-"+name)))
		c.Nodes = append(c.Nodes, &RedisNode{RedisServer: srv, Name: name})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		id, err := n.do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			tb.Fatalf("%s: cluster myid: %v", n.Name, err)
		}
		n.ID = id
	}
	first := c.Nodes[0]
	for _, n := range c.Nodes[1:] {
		if err := first.do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port).Err(); err != nil {
			tb.Fatalf("cluster meet %s: %v", n.Name, err)
		}
	}
	for i, n := range c.Nodes[:o.Primaries] {
		lo, hi := i*16384/o.Primaries, (i+1)*16384/o.Primaries-1
		if err := n.do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			tb.Fatalf("%s: add slots %d-%d: %v", n.Name, lo, hi, err)
		}
	}
	for i, n := range c.Nodes[o.Primaries:] {
		primary := c.Nodes[i%o.Primaries]
		// A node can replicate only a primary it already knows.
		err := poll(ctx, func() error { return n.do(ctx, "CLUSTER", "REPLICATE", primary.ID).Err() })
		if err != nil {
			tb.Fatalf("%s: cluster replicate %s: %v", n.Name, primary.Name, err)
		}
	}
	if err := c.WaitHealthy(60*time.Second, len(c.Nodes)); err != nil {
		tb.Fatal(err)
	}
	return c
}

func poll(ctx context.Context, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// URL is the cluster as --redis takes it: redis+cluster:// with every node.
func (c *RedisCluster) URL() string {
	u := "redis+cluster://" + c.Nodes[0].Addr
	for i, n := range c.Nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + n.Addr
	}
	return u
}

// Addrs are the nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr)
	}
	return a
}

// do runs one command on this node alone, on a fresh connection.
func (n *RedisNode) do(ctx context.Context, args ...any) *redis.Cmd {
	cl := redis.NewClient(&redis.Options{Addr: n.Addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
	defer cl.Close()
	return cl.Do(ctx, args...)
}

// NodeRole is one line of CLUSTER NODES as a node sees it.
type NodeRole struct {
	ID, Addr string
	Myself   bool
	Primary  bool
	Failed   bool   // flagged fail or fail?
	Of       string // a replica's primary id
	Slots    string
}

// Roles reads CLUSTER NODES from node n.
func (n *RedisNode) Roles(ctx context.Context) ([]NodeRole, error) {
	out, err := n.do(ctx, "CLUSTER", "NODES").Text()
	if err != nil {
		return nil, err
	}
	var roles []NodeRole
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		r := NodeRole{ID: f[0], Addr: addr, Myself: strings.Contains(f[2], "myself"), Primary: strings.Contains(f[2], "master"),
			Failed: strings.Contains(f[2], "fail"), Slots: strings.Join(f[8:], " ")}
		if f[3] != "-" {
			r.Of = f[3]
		}
		roles = append(roles, r)
	}
	return roles, nil
}

// self is the node's own line of CLUSTER NODES.
func (n *RedisNode) self(ctx context.Context) (NodeRole, error) {
	roles, err := n.Roles(ctx)
	if err != nil {
		return NodeRole{}, err
	}
	for _, r := range roles {
		if r.Myself {
			return r, nil
		}
	}
	return NodeRole{}, fmt.Errorf("%s: no myself line in CLUSTER NODES", n.Name)
}

// info reads one field of INFO from node n.
func (n *RedisNode) info(ctx context.Context, section, field string) (string, error) {
	out, err := n.do(ctx, "INFO", section).Text()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: no %s in INFO %s", n.Name, field, section)
}

// Primaries are the running nodes that serve slots, as each sees itself.
func (c *RedisCluster) Primaries(ctx context.Context) ([]*RedisNode, error) {
	var out []*RedisNode
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		me, err := n.self(ctx)
		if err != nil {
			return nil, err
		}
		if me.Primary && me.Slots != "" {
			out = append(out, n)
		}
	}
	return out, nil
}

// ReplicaOf is a running replica of primary p, nil when none.
func (c *RedisCluster) ReplicaOf(ctx context.Context, p *RedisNode) *RedisNode {
	for _, n := range c.Nodes {
		if n == p || !n.Running() {
			continue
		}
		if me, err := n.self(ctx); err == nil && me.Of == p.ID {
			return n
		}
	}
	return nil
}

// Node is the node with the cluster id, nil when none.
func (c *RedisCluster) Node(id string) *RedisNode {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// WaitHealthy waits until want nodes run, each says cluster_state:ok and
// knows every node, and every running replica's link to its primary is up
// and synced.
func (c *RedisCluster) WaitHealthy(timeout time.Duration, want int) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if last = c.healthy(ctx, want); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redis cluster not healthy after %s: %v", timeout, last)
}

func (c *RedisCluster) healthy(ctx context.Context, want int) error {
	running := 0
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		running++
		ci, err := n.do(ctx, "CLUSTER", "INFO").Text()
		if err != nil {
			return fmt.Errorf("%s: cluster info: %v", n.Name, err)
		}
		if !strings.Contains(ci, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state not ok", n.Name)
		}
		if !strings.Contains(ci, fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes))) {
			return fmt.Errorf("%s does not know all %d nodes yet", n.Name, len(c.Nodes))
		}
		role, err := n.info(ctx, "replication", "role")
		if err != nil {
			return err
		}
		if role == "slave" {
			if link, _ := n.info(ctx, "replication", "master_link_status"); link != "up" {
				return fmt.Errorf("%s: link to its primary %s", n.Name, link)
			}
			if sync, _ := n.info(ctx, "replication", "master_sync_in_progress"); sync != "0" {
				return fmt.Errorf("%s: replica still syncing", n.Name)
			}
		}
	}
	if running != want {
		return fmt.Errorf("%d nodes run, want %d", running, want)
	}
	return nil
}

// WaitPrimary waits until node n (a replica of a primary that died) serves
// slots as a primary and every running node says cluster_state:ok.
func (c *RedisCluster) WaitPrimary(ctx context.Context, n *RedisNode) error {
	var last error
	for ctx.Err() == nil {
		last = func() error {
			role, err := n.info(ctx, "replication", "role")
			if err != nil {
				return err
			}
			me, err := n.self(ctx)
			if err != nil {
				return err
			}
			if role != "master" || !me.Primary || me.Slots == "" {
				return fmt.Errorf("%s is still a replica (role %s)", n.Name, role)
			}
			for _, x := range c.Nodes {
				if !x.Running() {
					continue
				}
				ci, err := x.do(ctx, "CLUSTER", "INFO").Text()
				if err != nil {
					return err
				}
				if !strings.Contains(ci, "cluster_state:ok") {
					return fmt.Errorf("%s: cluster_state not ok", x.Name)
				}
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("promotion of %s: %w", n.Name, last)
}

// DBSize is the number of keys on node n.
func (n *RedisNode) DBSize(ctx context.Context) (int64, error) {
	return n.do(ctx, "DBSIZE").Int64()
}
