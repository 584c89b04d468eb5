package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSConfig says how to run a nats-server with JetStream on 127.0.0.1.
type NATSConfig struct {
	// Dir holds the JetStream store (Dir/js) and the logs. Required.
	Dir string
	// Name is the server's name. Default "nats".
	Name string
	// Port is the client port. Default: a free one.
	Port int
	// Embedded runs the server in this process; otherwise it is a process
	// of Bin, with an HTTP monitoring port.
	Embedded bool
	// Bin is the nats-server binary of a process. Required for one.
	Bin string
	// ConfigFile is a process's -c: its settings hold except the address,
	// the ports, the name and the store dir, which the flags set (flags
	// win over the file in nats-server). Without one, -js turns JetStream
	// on.
	ConfigFile string
	// Args go to a process after the flags above.
	Args []string
	// Env is added to a process's environment (a config's $VARIABLES).
	Env []string
	// Options edits an embedded server's options last, before it starts:
	// a JetStream domain, options parsed from a config file. A server whose
	// options say NoLog false logs to stderr.
	Options func(*server.Options)
	// Cluster makes the server a node of a JetStream cluster.
	Cluster *NATSClusterConfig
}

// NATSClusterConfig is a node's place in a JetStream cluster.
type NATSClusterConfig struct {
	Name   string // the cluster's name
	Port   int    // this node's route port on 127.0.0.1
	Routes []int  // the other nodes' route ports
}

// NATS is a running nats-server. Start, Kill and Restart keep its ports
// and store: a restarted cluster node catches up from the others.
type NATS struct {
	Name        string
	URL         string
	Port        int
	Monitor     int // the process's HTTP monitoring port (/healthz, /jsz); 0 embedded
	ClusterPort int
	Dir         string
	// Server is the embedded server; nil for a process, and while an
	// embedded server is down.
	Server *server.Server

	proc *Proc           // a process
	opts *server.Options // an embedded server
}

// StartNATS starts a nats-server and waits until it takes connections
// and, unless it is a cluster node (whose JetStream waits for a quorum:
// see NATSCluster.WaitHealthy), until JetStream is ready. Ports it picked
// that another process took meanwhile make it try others.
func StartNATS(ctx context.Context, cfg NATSConfig) (*NATS, error) {
	if cfg.Dir == "" {
		return nil, errors.New("nats-server: no store directory")
	}
	if cfg.Name == "" {
		cfg.Name = "nats"
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Embedded {
		return startEmbedded(cfg)
	}
	for attempt := 1; ; attempt++ {
		n, err := startNATSProcess(ctx, cfg)
		if err == nil {
			return n, nil
		}
		if attempt < 5 && n != nil && lostPortRace(n.proc) {
			continue
		}
		return nil, err
	}
}

func startNATSProcess(ctx context.Context, cfg NATSConfig) (n *NATS, err error) {
	if cfg.Bin == "" {
		return nil, errors.New("nats-server: no binary")
	}
	n = &NATS{Name: cfg.Name, Port: cfg.Port, Dir: cfg.Dir}
	if n.Port <= 0 {
		if n.Port, err = FreePort(0); err != nil {
			return nil, err
		}
	}
	if n.Monitor, err = FreePort(0); err != nil {
		return nil, err
	}
	n.URL = fmt.Sprintf("nats://127.0.0.1:%d", n.Port)
	args := []string{"-a", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-m", strconv.Itoa(n.Monitor), "-n", cfg.Name}
	storeDir := filepath.Join(cfg.Dir, "js")
	if cfg.ConfigFile == "" {
		args = append(args, "-js", "-sd", storeDir)
	} else {
		conf, moved, err := moveStoreDir(cfg.ConfigFile, cfg.Dir, storeDir)
		if err != nil {
			return nil, err
		}
		args = append(args, "-c", conf)
		if !moved {
			args = append(args, "-sd", storeDir)
		}
	}
	if c := cfg.Cluster; c != nil {
		n.ClusterPort = c.Port
		var routes []string
		for _, p := range c.Routes {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		}
		args = append(args, "--cluster_name", c.Name, "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", c.Port), "--routes", strings.Join(routes, ","))
	}
	args = append(args, cfg.Args...)
	n.proc = New(Config{Name: cfg.Name, Path: cfg.Bin, Args: args, Env: cfg.Env, Dir: cfg.Dir})
	if err := n.proc.Start(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ready := n.Healthy
	if cfg.Cluster != nil {
		ready = n.listening
	}
	if err := n.proc.WaitReady(ctx, ready); err != nil {
		_ = n.proc.Stop(0)
		return n, err
	}
	return n, nil
}

func startEmbedded(cfg NATSConfig) (*NATS, error) {
	o := &server.Options{
		ServerName: cfg.Name,
		Host:       "127.0.0.1",
		Port:       cfg.Port,
		JetStream:  true,
		StoreDir:   filepath.Join(cfg.Dir, "js"),
		NoLog:      true,
		NoSigs:     true,
	}
	if o.Port <= 0 {
		o.Port = server.RANDOM_PORT
	}
	if c := cfg.Cluster; c != nil {
		o.Cluster = server.ClusterOpts{Name: c.Name, Host: "127.0.0.1", Port: c.Port}
		for _, p := range c.Routes {
			o.Routes = append(o.Routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
		}
	}
	if cfg.Options != nil {
		cfg.Options(o)
	}
	n := &NATS{Name: o.ServerName, Dir: cfg.Dir, ClusterPort: o.Cluster.Port, opts: o}
	if err := n.Start(); err != nil {
		return nil, err
	}
	// A restart takes the same port.
	o.Port = n.Server.Addr().(*net.TCPAddr).Port
	n.Port = o.Port
	n.URL = n.Server.ClientURL()
	return n, nil
}

// Start starts the server again and waits until it is healthy: a process's
// /healthz answers 200 once JetStream has recovered its store and, in a
// cluster, has caught up.
func (n *NATS) Start() error {
	if n.opts == nil {
		if err := n.proc.Start(); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		return n.proc.WaitReady(ctx, n.Healthy)
	}
	if n.Server != nil {
		return fmt.Errorf("%s already runs", n.Name)
	}
	s, err := server.NewServer(n.opts)
	if err != nil {
		return fmt.Errorf("nats-server %s: %w", n.Name, err)
	}
	if !n.opts.NoLog {
		s.ConfigureLogger()
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return fmt.Errorf("nats-server %s not ready for connections", n.Name)
	}
	n.Server = s
	return nil
}

// Kill ends the server at once: a process is SIGKILLed (no flush, no
// snapshot, like a node that dies); an embedded server shuts down.
func (n *NATS) Kill() error {
	if n.opts == nil {
		return n.proc.Kill()
	}
	if n.Server == nil {
		return fmt.Errorf("%s is not running", n.Name)
	}
	n.Server.Shutdown()
	n.Server.WaitForShutdown()
	n.Server = nil
	return nil
}

// Stop ends the server if it runs.
func (n *NATS) Stop() {
	if n.opts == nil {
		_ = n.proc.Stop(0)
		return
	}
	if n.Server != nil {
		_ = n.Kill()
	}
}

// Restart kills the server, waits pause, and starts it on the same port
// and store.
func (n *NATS) Restart(pause time.Duration) error {
	if err := n.Kill(); err != nil {
		return err
	}
	time.Sleep(pause)
	return n.Start()
}

// Pause freezes a process with SIGSTOP for d, then lets it go on.
func (n *NATS) Pause(d time.Duration) error {
	if n.opts != nil {
		return errors.New("an embedded nats-server cannot be paused")
	}
	return n.proc.Pause(d)
}

// Running reports whether the server runs.
func (n *NATS) Running() bool {
	if n.opts == nil {
		return n.proc.Running()
	}
	return n.Server != nil
}

// Pid is the process's id, 0 when it is down; this process's for an
// embedded server.
func (n *NATS) Pid() int {
	if n.opts == nil {
		return n.proc.Pid()
	}
	if n.Server == nil {
		return 0
	}
	return os.Getpid()
}

// Logs are the process's logs, one per start; none for an embedded server.
func (n *NATS) Logs() []string {
	if n.opts == nil {
		return n.proc.Logs()
	}
	return nil
}

// Exits are the process's ends that neither Kill nor Stop caused.
func (n *NATS) Exits() []Exit {
	if n.opts == nil {
		return n.proc.Exits()
	}
	return nil
}

// listening succeeds once the client port takes connections.
func (n *NATS) listening() error {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", n.Port), time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// Healthy succeeds when the server says it is: JetStream is up and, in a
// cluster, its meta layer, streams and consumers are current.
func (n *NATS) Healthy() error {
	if n.opts != nil {
		if n.Server == nil {
			return fmt.Errorf("%s is not running", n.Name)
		}
		if h := n.Server.Healthz(nil); h.Error != "" || len(h.Errors) > 0 {
			return fmt.Errorf("%s healthz: %s %v", n.Name, h.Error, h.Errors)
		}
		return nil
	}
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

// MetaLeader is the JetStream meta leader the server knows, "" when none.
func (n *NATS) MetaLeader() (string, error) {
	if n.opts != nil {
		if n.Server == nil {
			return "", fmt.Errorf("%s is not running", n.Name)
		}
		info, err := n.Server.Jsz(&server.JSzOptions{})
		if err != nil || info.Meta == nil {
			return "", err
		}
		return info.Meta.Leader, nil
	}
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/jsz", n.Monitor))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var j struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return "", err
	}
	if j.Meta == nil {
		return "", nil
	}
	return j.Meta.Leader, nil
}

// storeDirSetting is a store_dir setting in a nats-server config;
// includeLine is an include of another config file.
var (
	storeDirSetting = regexp.MustCompile(`\b(store_dir|storedir)(\s*[:=]\s*|[ \t]+)("[^"\n]*"|'[^'\n]*'|[^\s,}]+)`)
	includeLine     = regexp.MustCompile(`(?m)^(\s*include\s+)("([^"\n]+)"|'([^'\n]+)'|(\S+))`)
)

// moveStoreDir returns the config file to run instead of the one at path,
// and whether it sets the store dir: a file that sets it is copied into
// dir with its store_dir settings set to storeDir (nats-server refuses a
// store dir given both in its file and by a flag) and its includes still
// naming the same files.
func moveStoreDir(path, dir, storeDir string) (conf string, moved bool, err error) {
	if path, err = filepath.Abs(path); err != nil {
		return "", false, err
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return "", false, err
	}
	if !storeDirSetting.Match(text) {
		return path, false, nil
	}
	text = storeDirSetting.ReplaceAll(text, []byte(fmt.Sprintf("store_dir: %q", storeDir)))
	// nats-server reads an include relative to the including file.
	text = includeLine.ReplaceAllFunc(text, func(m []byte) []byte {
		g := includeLine.FindSubmatch(m)
		inc := string(g[3]) + string(g[4]) + string(g[5])
		rel, err := filepath.Rel(dir, filepath.Join(filepath.Dir(path), inc))
		if err != nil {
			return m
		}
		return []byte(fmt.Sprintf("%s%q", g[1], rel))
	})
	conf = filepath.Join(dir, "rendered-"+filepath.Base(path))
	return conf, true, os.WriteFile(conf, text, 0o600)
}

// NATSCluster is a JetStream cluster of nats-servers on loopback.
type NATSCluster struct {
	Nodes []*NATS
}

// StartNATSCluster starts n servers named n1..nN as the JetStream cluster
// "durable", each with a route to the others and its store and logs in
// cfg.Dir/nats-<name>, and waits until they agree on a meta leader. cfg
// holds for every node but its name, ports and routes. With n = 1 the
// server is not clustered. On error it stops what it started.
func StartNATSCluster(ctx context.Context, n int, cfg NATSConfig) (*NATSCluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := startNATSCluster(ctx, n, cfg)
		// A route port picked for the cluster was taken meanwhile by
		// another process (a node's own retry keeps it: every node's
		// routes name it): pick them all again.
		if err != nil && attempt < 5 && strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			continue
		}
		return c, err
	}
}

func startNATSCluster(ctx context.Context, n int, cfg NATSConfig) (*NATSCluster, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := FreePort(0)
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	c := &NATSCluster{}
	fail := func(err error) (*NATSCluster, error) {
		for _, node := range c.Nodes {
			node.Stop()
		}
		return nil, err
	}
	base := cfg.Dir
	for i := range n {
		node := cfg
		node.Name = fmt.Sprintf("n%d", i+1)
		node.Dir = filepath.Join(base, "nats-"+node.Name)
		node.Port = 0
		if n > 1 {
			cl := &NATSClusterConfig{Name: "durable", Port: ports[i]}
			for j, p := range ports {
				if j != i {
					cl.Routes = append(cl.Routes, p)
				}
			}
			node.Cluster = cl
		}
		s, err := StartNATS(ctx, node)
		if err != nil {
			return fail(err)
		}
		c.Nodes = append(c.Nodes, s)
	}
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.WaitHealthy(wctx); err != nil {
		return fail(err)
	}
	return c, nil
}

// URL lists every node, comma-separated, as --nats takes it.
func (c *NATSCluster) URL() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.URL)
	}
	return strings.Join(urls, ",")
}

// WaitHealthy waits until every running node is healthy and, with more
// than one node, all of them name the same meta leader.
func (c *NATSCluster) WaitHealthy(ctx context.Context) error {
	var last error
	for {
		if last = c.healthy(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			var tails []string
			for _, n := range c.Nodes {
				if logs := n.Logs(); len(logs) > 0 {
					tails = append(tails, n.Name+":\n"+LastLines(logs[len(logs)-1], 8))
				}
			}
			return fmt.Errorf("NATS cluster not healthy: %v\n%s", last, strings.Join(tails, "\n"))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *NATSCluster) healthy() error {
	leader, running := "", 0
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		running++
		if err := n.Healthy(); err != nil {
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
	if running == 0 {
		return errors.New("no node runs")
	}
	return nil
}
