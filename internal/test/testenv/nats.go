package testenv

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/proc"
)

// NATSServerBin builds the nats-server binary from the module (the same
// version the embedded server runs) once per test binary.
func NATSServerBin(tb testing.TB) string {
	tb.Helper()
	return Binary(tb, "github.com/nats-io/nats-server/v2")
}

// NATSServer is a nats-server a test started: a process it can kill,
// freeze and start again on the same ports and store, or a server
// embedded in the test (see proc.NATS).
type NATSServer struct {
	*proc.NATS
}

// NATS is the server StartNATS starts.
type NATS = NATSServer

// NATSCluster is a JetStream cluster StartNATSCluster started.
type NATSCluster = proc.NATSCluster

// NATSOption changes what StartNATSServer starts.
type NATSOption func(*proc.NATSConfig)

// NATSEmbedded runs the server in the test's process.
func NATSEmbedded() NATSOption {
	return func(c *proc.NATSConfig) { c.Embedded = true }
}

// NATSArgs adds arguments to a process's command line, after testenv's.
func NATSArgs(args ...string) NATSOption {
	return func(c *proc.NATSConfig) { c.Args = append(c.Args, args...) }
}

// NATSConfigFile starts a process with the config file at path: its
// settings hold but for the address, ports, name and store dir, which
// testenv sets.
func NATSConfigFile(path string) NATSOption {
	return func(c *proc.NATSConfig) { c.ConfigFile = path }
}

// NATSEnv adds to a process's environment: the $VARIABLES of its config.
func NATSEnv(env ...string) NATSOption {
	return func(c *proc.NATSConfig) { c.Env = append(c.Env, env...) }
}

// NATSDir keeps the server's store and logs in dir rather than a temp dir.
func NATSDir(dir string) NATSOption {
	return func(c *proc.NATSConfig) { c.Dir = dir }
}

// NATSPort is the client port; <= 0 picks a free one (the default).
func NATSPort(port int) NATSOption {
	return func(c *proc.NATSConfig) { c.Port = port }
}

// NATSServerOptions edits an embedded server's options last, before it
// starts: a JetStream domain, options parsed from a config file.
func NATSServerOptions(edit func(*server.Options)) NATSOption {
	return func(c *proc.NATSConfig) { c.Options = edit }
}

func natsConfig(tb testing.TB, opts []NATSOption) proc.NATSConfig {
	tb.Helper()
	var cfg proc.NATSConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	if !cfg.Embedded && cfg.Bin == "" {
		cfg.Bin = NATSServerBin(tb)
	}
	return cfg
}

// StartNATSServer starts nats-server with JetStream as a process of the
// module's binary on free 127.0.0.1 ports (client and HTTP monitoring),
// its store in a temp dir; opts change that. It waits until JetStream is
// ready and kills the server at cleanup.
func StartNATSServer(tb testing.TB, opts ...NATSOption) *NATSServer {
	tb.Helper()
	n, err := proc.StartNATS(context.Background(), natsConfig(tb, opts))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(n.Stop)
	return &NATSServer{n}
}

// StartNATS starts an embedded JetStream server on a free 127.0.0.1 port
// with its store in a temp dir.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	return StartNATSServer(tb, NATSEmbedded())
}

// StartNATSAt starts an embedded JetStream server with its store in dir on
// the given port (-1 for a free one): a server started again on its data.
func StartNATSAt(tb testing.TB, dir string, port int) *NATS {
	tb.Helper()
	return StartNATSServer(tb, NATSEmbedded(), NATSDir(dir), NATSPort(port))
}

// StartNATSProcess starts nats-server as a process, as StartNATSServer
// does: for a test that measures its own process's memory.
func StartNATSProcess(tb testing.TB) *NATSServer {
	tb.Helper()
	return StartNATSServer(tb)
}

// StartNATSCluster starts n nats-servers (opts hold for each: processes
// unless NATSEmbedded) named n1..nN as one JetStream cluster with routes
// between them, each with its store and logs under the dir, and waits
// until they agree on a meta leader. They are killed at cleanup. With
// n = 1 the server is not clustered.
func StartNATSCluster(tb testing.TB, n int, opts ...NATSOption) *NATSCluster {
	tb.Helper()
	c, err := proc.StartNATSCluster(context.Background(), n, natsConfig(tb, opts))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, node := range c.Nodes {
			node.Stop()
		}
	})
	return c
}

// Connect opens a client connection and a JetStream context, closed at
// cleanup.
func (n *NATSServer) Connect(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, err := nats.Connect(n.URL)
	if err != nil {
		tb.Fatalf("connect nats: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
