package fleet

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/testenv"
)

// NATSCluster is a JetStream cluster of nats-server processes on loopback.
type NATSCluster struct {
	Nodes []*NATSNode
}

// NATSNode is one server of the cluster. Kill and Start keep its ports and
// store directory: a restarted node catches up from the others.
type NATSNode struct {
	Name        string
	URL         string
	Port        int
	ClusterPort int
	Monitor     int
	StoreDir    string
	Proc        *Proc
}

// StartNATSCluster starts n nats-server processes (the binary of the
// module's nats-server, testenv.NATSServerBin) as one JetStream cluster,
// named n1..nN, each with a route to the others and its store under dir,
// and waits until they have elected a meta leader. With n = 1 the server
// is not clustered.
func StartNATSCluster(tb testing.TB, dir string, n int) *NATSCluster {
	tb.Helper()
	bin := testenv.NATSServerBin(tb)
	c := &NATSCluster{}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		node := &NATSNode{Name: name, Port: freePort(tb, false), ClusterPort: freePort(tb, false), Monitor: freePort(tb, false),
			StoreDir: filepath.Join(dir, "nats-"+name)}
		node.URL = fmt.Sprintf("nats://127.0.0.1:%d", node.Port)
		c.Nodes = append(c.Nodes, node)
	}
	for _, node := range c.Nodes {
		var routes []string
		for _, other := range c.Nodes {
			if other != node {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", other.ClusterPort))
			}
		}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream {
  store_dir: %q
}
`, node.Name, node.Port, node.Monitor, node.StoreDir)
		if n > 1 {
			conf += fmt.Sprintf(`cluster {
  name: durable
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, node.ClusterPort, strings.Join(routes, ", "))
		}
		path := filepath.Join(dir, "nats-"+node.Name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			tb.Fatal(err)
		}
		node.Proc = NewProc(tb, "nats-"+node.Name, dir, bin, []string{"-c", path}, nil)
		if err := node.Proc.Start(); err != nil {
			tb.Fatal(err)
		}
	}
	if err := c.WaitHealthy(60 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return c
}

// URL lists every node, comma-separated, as --nats takes it.
func (c *NATSCluster) URL() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL)
	}
	return strings.Join(urls, ",")
}

// Kill SIGKILLs the node.
func (n *NATSNode) Kill() error { return n.Proc.Kill() }

// Start starts the node again on its ports and store, and waits until its
// JetStream is healthy (caught up with the cluster).
func (n *NATSNode) Start(timeout time.Duration) error {
	if err := n.Proc.Start(); err != nil {
		return err
	}
	return n.Proc.waitReady(timeout, n.healthy)
}

// healthy asks /healthz: 200 once JetStream is up and, in a cluster, its
// meta layer, streams and consumers are current.
func (n *NATSNode) healthy() error {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.Monitor))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /healthz: %s", n.Name, resp.Status)
	}
	return nil
}

// metaCluster is the part of /jsz the cluster checks read.
type metaCluster struct {
	Meta *struct {
		Leader   string `json:"leader"`
		Size     int    `json:"cluster_size"`
		Replicas []struct {
			Name    string `json:"name"`
			Current bool   `json:"current"`
			Offline bool   `json:"offline"`
		} `json:"replicas"`
	} `json:"meta_cluster"`
}

// MetaLeader is the meta leader the node knows, "" when none.
func (n *NATSNode) MetaLeader() (string, error) {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.Monitor))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var j metaCluster
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return "", err
	}
	if j.Meta == nil {
		return "", nil
	}
	return j.Meta.Leader, nil
}

// WaitHealthy waits until every running node is healthy and all of them
// name the same meta leader.
func (c *NATSCluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		last = c.healthy()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	var tails []string
	for _, n := range c.Nodes {
		tails = append(tails, n.Name+":\n"+testenv.LastLines(n.Proc.Log(), 8))
	}
	return fmt.Errorf("NATS cluster not healthy after %s: %v\n%s", timeout, last, strings.Join(tails, "\n"))
}

func (c *NATSCluster) healthy() error {
	leader := ""
	for _, n := range c.Nodes {
		if n.Proc.Pid() == 0 {
			continue
		}
		if err := n.healthy(); err != nil {
			return err
		}
		if len(c.Nodes) == 1 {
			return nil // not clustered: no meta leader
		}
		l, err := n.MetaLeader()
		if err != nil {
			return err
		}
		if l == "" {
			return fmt.Errorf("%s knows no meta leader", n.Name)
		}
		if leader != "" && l != leader {
			return fmt.Errorf("nodes disagree on the meta leader: %s and %s", leader, l)
		}
		leader = l
	}
	if leader == "" {
		return fmt.Errorf("no node runs")
	}
	return nil
}
