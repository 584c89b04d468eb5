package testenv_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
)

func redisClient(t *testing.T, url string) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// A server with the AOF fsynced at every write keeps what it acknowledged
// through a SIGKILL and starts again on its port; each start has its log.
func TestRedisServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs redis-server")
	}
	r := testenv.StartRedisServer(t, testenv.RedisAOF("always"))
	ctx := context.Background()
	c := redisClient(t, r.URL)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := r.Pid()
	if err := r.Restart(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r.Pid() == 0 || r.Pid() == pid {
		t.Fatalf("pid %d after a restart of pid %d", r.Pid(), pid)
	}
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after the restart: %q, %v", v, err)
	}
	if logs := r.Logs(); len(logs) != 2 {
		t.Errorf("logs %v, want one per start", logs)
	}
	if err := r.Pause(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if exits := r.Exits(); len(exits) != 0 {
		t.Errorf("exits the test caused are reported: %v", exits)
	}
}

// A server that wants credentials is up once it refuses a client without
// them; the unix socket is its only address.
func TestRedisServerWithPassword(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs redis-server")
	}
	r := testenv.StartRedisServer(t, testenv.RedisUnixSocket(), testenv.RedisArgs("--requirepass", "pw"))
	if r.Addr != "" || !strings.HasPrefix(r.URL, "unix://") {
		t.Fatalf("addr %q url %q: want the unix socket alone", r.Addr, r.URL)
	}
	ctx := context.Background()
	if err := redisClient(t, r.URL).Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without the password: %v, want NOAUTH", err)
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: r.Sock, Password: "pw"})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}

func publish(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := js.Publish(ctx, fmt.Sprintf("t.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
}

func streamMsgs(t *testing.T, url string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), "T")
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

// A nats-server, process or embedded, starts again on its port and store
// and keeps its streams.
func TestNATSServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs nats-server")
	}
	for name, opts := range map[string][]testenv.NATSOption{"process": nil, "embedded": {testenv.NATSEmbedded()}} {
		t.Run(name, func(t *testing.T) {
			n := testenv.StartNATSServer(t, opts...)
			nc, js := n.Connect(t)
			publish(t, js, 3)
			nc.Close()
			url := n.URL
			if err := n.Restart(0); err != nil {
				t.Fatal(err)
			}
			if n.URL != url || !n.Running() {
				t.Fatalf("after the restart: %s (running %t), want %s", n.URL, n.Running(), url)
			}
			if got := streamMsgs(t, n.URL); got != 3 {
				t.Errorf("%d messages after the restart, want 3", got)
			}
		})
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A process started from a config file takes its settings (here a user
// and password, from a file it includes) with testenv's address, ports
// and store dir.
func TestNATSServerConfigFile(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs nats-server")
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "users.conf"), "authorization { user: ops, password: $OPS_PASSWORD }\n")
	conf := filepath.Join(dir, "nats.conf")
	writeFile(t, conf, "port: 4222\nhttp_port: 8222\njetstream { store_dir: \"/unused\" }\ninclude \"users.conf\"\n")
	n := testenv.StartNATSServer(t, testenv.NATSConfigFile(conf), testenv.NATSEnv("OPS_PASSWORD=s3cret"))
	if n.Port == 4222 {
		t.Fatal("the config file's port was kept")
	}
	if nc, err := nats.Connect(n.URL); err == nil {
		nc.Close()
		t.Fatal("connected without the password")
	}
	nc, err := nats.Connect(n.URL, nats.UserInfo("ops", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AccountInfo(context.Background()); err != nil {
		t.Fatalf("JetStream: %v", err)
	}
}

// Three embedded servers make one JetStream cluster whose R3 stream
// survives a node's restart.
func TestNATSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: runs a nats-server cluster")
	}
	c := testenv.StartNATSCluster(t, 3, testenv.NATSEmbedded())
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(st.CachedInfo().Cluster.Replicas) + 1; got != 3 {
		t.Fatalf("%d peers, want 3", got)
	}
	if err := c.Nodes[2].Restart(0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}
