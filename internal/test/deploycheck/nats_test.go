package deploycheck

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
)

// setNATSEnv sets what the compose file gives every nats-server node: the
// users' and the routes' passwords and the route URLs.
func setNATSEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range composeProject(t).Services["nats-1"].Environment {
		if v == nil {
			t.Fatalf("compose nats-1: %s has no value", k)
		}
		env[k] = *v
		t.Setenv(k, *v)
	}
	return env
}

// natsConfig parses a config file with nats-server's own parser, as
// `nats-server --config` does: unknown fields and unset variables fail.
func natsConfig(t testing.TB, elem ...string) *server.Options {
	t.Helper()
	path := deployPath(t, append([]string{"nats"}, elem...)...)
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return opts
}

// The three node configs make one JetStream cluster: each names itself,
// routes to the other two with the credentials they require, and keeps
// the users, permissions and account of deploy/nats/nats-server.conf
// (whose permissions internal/cli/nats_permissions_test.go tests).
func TestNATSClusterConfigs(t *testing.T) {
	env := setNATSEnv(t)
	standalone := natsConfig(t, "nats-server.conf")
	var clusterName string
	for i, node := range natsNodes {
		o := natsConfig(t, "cluster", node+".conf")
		where := "deploy/nats/cluster/" + node + ".conf"
		if o.ServerName != node {
			t.Errorf("%s: server_name %q, want %q (compose's service name)", where, o.ServerName, node)
		}
		if !o.JetStream || o.StoreDir == "" {
			t.Errorf("%s: JetStream %t with store_dir %q, want it on, on the data volume", where, o.JetStream, o.StoreDir)
		}
		if o.Port != 4222 || o.HTTPPort != 8222 {
			t.Errorf("%s: client port %d, monitoring %d: compose expects 4222 and 8222", where, o.Port, o.HTTPPort)
		}
		if clusterName == "" {
			clusterName = o.Cluster.Name
		}
		if o.Cluster.Name == "" || o.Cluster.Name != clusterName || o.Cluster.Port != 6222 {
			t.Errorf("%s: cluster %q on port %d, want one name for all nodes, port 6222", where, o.Cluster.Name, o.Cluster.Port)
		}
		if o.Cluster.Username == "" || o.Cluster.Password != env["DURABLE_NATS_ROUTE_PASSWORD"] {
			t.Errorf("%s: routes must authenticate (cluster authorization with DURABLE_NATS_ROUTE_PASSWORD)", where)
		}
		var peers []string
		for _, r := range o.Routes {
			peers = append(peers, r.Host)
			pw, _ := r.User.Password()
			if r.Scheme != "nats-route" || r.User.Username() != o.Cluster.Username || pw != o.Cluster.Password {
				t.Errorf("%s: route %s does not log in as the cluster's route user", where, r.Redacted())
			}
		}
		slices.Sort(peers)
		var want []string
		for j, other := range natsNodes {
			if j != i {
				want = append(want, other+":6222")
			}
		}
		if !slices.Equal(peers, want) {
			t.Errorf("%s: routes to %v, want the other two nodes %v", where, peers, want)
		}
		if got, want := usersOf(o), usersOf(standalone); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: users and permissions differ from deploy/nats/nats-server.conf:\n got %v\nwant %v", where, got, want)
		}
		var accounts []string
		for _, a := range o.Accounts {
			accounts = append(accounts, a.Name)
		}
		if !slices.Contains(accounts, "DURABLE") {
			t.Errorf("%s: accounts %v, want DURABLE", where, accounts)
		}
	}
}

// usersOf is each user's account and permissions, comparable across
// parses.
func usersOf(o *server.Options) map[string]string {
	m := map[string]string{}
	for _, u := range o.Users {
		acc := ""
		if u.Account != nil {
			acc = u.Account.Name
		}
		m[u.Username] = fmt.Sprintf("account %s, password set %t, permissions %+v", acc, u.Password != "", permString(u.Permissions))
	}
	return m
}

func permString(p *server.Permissions) string {
	if p == nil {
		return "none"
	}
	sp := func(s *server.SubjectPermission) string {
		if s == nil {
			return "-"
		}
		return fmt.Sprintf("allow %v deny %v", s.Allow, s.Deny)
	}
	resp := "-"
	if p.Response != nil {
		resp = fmt.Sprintf("%d/%s", p.Response.MaxMsgs, p.Response.Expires)
	}
	return fmt.Sprintf("pub{%s} sub{%s} responses{%s}", sp(p.Publish), sp(p.Subscribe), resp)
}

// The three node configs, started as they are (ports and store dirs
// moved to loopback and temp dirs), form a JetStream cluster that takes
// the exported stream and consumer files from the nats CLI, and what it
// makes of them is what the worker makes from the code at DURABLE_REPLICAS=3.
func TestNATSClusterAcceptsExportedConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: a three-node nats-server cluster and the nats CLI")
	}
	natsCLI := testenv.NATSCLI(t)
	env := setNATSEnv(t)
	urls, servers := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cliJS := connect(t, urls, "cli", env["DURABLE_NATS_CLI_PASSWORD"], "")
	testenv.Eventually(t, 30*time.Second, "JetStream cluster ready", func() bool {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := cliJS.AccountInfo(actx)
		return err == nil
	})

	for i, s := range servers {
		acc, err := s.LookupAccount("DURABLE")
		if err != nil || !acc.JetStreamEnabled() || !s.JetStreamIsClustered() {
			t.Fatalf("%s: account DURABLE: %v, JetStream enabled %t, clustered %t", natsNodes[i], err, err == nil && acc.JetStreamEnabled(), s.JetStreamIsClustered())
		}
	}

	// 1. The operator's way: the nats CLI with the exported files.
	nats := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, natsCLI, append([]string{"--server", strings.Join(urls, ","), "--user", "cli", "--timeout", "10s"}, args...)...)
		cmd.Env = append(os.Environ(), "NATS_PASSWORD="+env["DURABLE_NATS_CLI_PASSWORD"], "HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	streamFiles, _ := filepath.Glob(deployPath(t, "nats", "streams", "*.json"))
	consumerFiles, _ := filepath.Glob(deployPath(t, "nats", "consumers", "*.json"))
	for _, f := range streamFiles {
		nats("stream", "add", "--config", f, "--validate")
		nats("stream", "add", "--config", f)
	}
	for _, f := range consumerFiles {
		nats("consumer", "add", queue.StepStream, "--config", f, "--validate")
		nats("consumer", "add", queue.StepStream, "--config", f)
	}
	fromFiles := jetStreamState(ctx, t, cliJS)
	if len(fromFiles.streams) != len(streamFiles) || len(fromFiles.consumers) != len(consumerFiles) {
		t.Fatalf("the nats CLI made %d streams and %d consumers from %d and %d files", len(fromFiles.streams), len(fromFiles.consumers), len(streamFiles), len(consumerFiles))
	}
	for name, sc := range fromFiles.streams {
		if sc.Replicas != streamReplicas {
			t.Errorf("stream %s: %d replicas, want %d", name, sc.Replicas, streamReplicas)
		}
	}

	// 2. The worker's way, as its NATS user: queue.Provision at R3 and
	// the shared consumers, on a clean slate.
	for name := range fromFiles.streams {
		if err := cliJS.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	workerJS := connect(t, urls, "worker", env["DURABLE_NATS_WORKER_PASSWORD"], "_INBOX_worker")
	if err := queue.Provision(ctx, workerJS, queue.Config{Replicas: streamReplicas}); err != nil {
		t.Fatalf("provision as the worker user: %v", err)
	}
	for _, wf := range cli.ReferenceWorkflows().Names() {
		if _, err := queue.EnsureConsumer(ctx, workerJS, queue.ConsumerConfig(wf, workerAckWait, workerMaxAckPending)); err != nil {
			t.Fatalf("consumer of %s as the worker user: %v", wf, err)
		}
	}
	fromCode := jetStreamState(ctx, t, cliJS)
	compareConfigs(t, "stream", fromFiles.streams, fromCode.streams)
	compareConfigs(t, "consumer", fromFiles.consumers, fromCode.consumers)
}

func compareConfigs[T jetstream.StreamConfig | jetstream.ConsumerConfig](t *testing.T, what string, files, code map[string]T) {
	t.Helper()
	for _, name := range slices.Sorted(mapKeys(code)) {
		f, ok := files[name]
		if !ok {
			t.Errorf("the code makes %s %s, the exported files do not", what, name)
			continue
		}
		if c := code[name]; !reflect.DeepEqual(f, c) {
			fj, _ := queue.ConfigJSON(f)
			cj, _ := queue.ConfigJSON(c)
			t.Errorf("%s %s as the server stores it differs:\nfrom the file %s\nfrom the code %s", what, name, fj, cj)
		}
	}
	for name := range files {
		if _, ok := code[name]; !ok {
			t.Errorf("the exported files make %s %s, the code does not", what, name)
		}
	}
}

type jsState struct {
	streams   map[string]jetstream.StreamConfig
	consumers map[string]jetstream.ConsumerConfig
}

// jetStreamState reads back every stream and step consumer as the server
// stores them (defaults filled in), minus what differs between any two
// creations.
func jetStreamState(ctx context.Context, t testing.TB, js jetstream.JetStream) jsState {
	t.Helper()
	st := jsState{streams: map[string]jetstream.StreamConfig{}, consumers: map[string]jetstream.ConsumerConfig{}}
	for name := range js.StreamNames(ctx).Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.Metadata = nil // the server's version stamps
		st.streams[name] = cfg
		if name != queue.StepStream {
			continue
		}
		for c := range s.ListConsumers(ctx).Info() {
			cc := c.Config
			cc.Metadata = nil
			if cc.PauseUntil != nil && cc.PauseUntil.IsZero() {
				cc.PauseUntil = nil // the nats CLI sends a zero time, the same as none
			}
			st.consumers[c.Name] = cc
		}
	}
	return st
}

// connect opens a JetStream context as user, closed at cleanup.
func connect(t testing.TB, urls []string, user, password, inbox string) jetstream.JetStream {
	t.Helper()
	opts := []nats.Option{nats.UserInfo(user, password), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1)}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// startCluster starts deploy/nats/cluster/nats-{1,2,3}.conf in-process,
// each parsed by nats-server, with only its addresses changed: client and
// route ports on free loopback ports, routes pointed at them, no
// monitoring port, JetStream in a temp dir. DEPLOYCHECK_NATS_LOG=1 shows
// their logs.
func startCluster(t *testing.T) (urls []string, servers []*server.Server) {
	t.Helper()
	clientPorts, routePorts := freePorts(t, len(natsNodes)), freePorts(t, len(natsNodes))
	for i, node := range natsNodes {
		file := natsConfig(t, "cluster", node+".conf")
		for _, r := range file.Routes {
			j := slices.Index(natsNodes, r.Hostname())
			if j < 0 {
				t.Fatalf("%s: route to unknown node %s", node, r.Hostname())
			}
			r.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(routePorts[j]))
		}
		n := testenv.StartNATSServer(t, testenv.NATSEmbedded(), testenv.NATSPort(clientPorts[i]),
			testenv.NATSServerOptions(func(o *server.Options) {
				// The file's options, on testenv's address and store.
				file.Host, file.Port, file.HTTPPort, file.StoreDir = o.Host, o.Port, 0, o.StoreDir
				file.Cluster.Host, file.Cluster.Port = "127.0.0.1", routePorts[i]
				file.NoLog, file.NoSigs = os.Getenv("DEPLOYCHECK_NATS_LOG") == "", true
				*o = *file
			}))
		urls = append(urls, (&url.URL{Scheme: "nats", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(n.Port))}).String())
		servers = append(servers, n.Server)
	}
	return urls, servers
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}
