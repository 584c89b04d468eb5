// Package testenv starts the real servers tests run against: a redis-server
// process on a unix socket and an embedded nats-server with JetStream on a
// loopback port. Every server is stopped by t.Cleanup.
package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Redis is a running redis-server.
type Redis struct {
	URL  string // redis://... or unix://... usable by redis.ParseURL
	Sock string
	Dir  string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server on a unix socket in a temp dir. It fails the
// test loudly when redis-server is not installed (run `make test`, which
// installs it). extraArgs are passed to redis-server (e.g. "--appendonly", "yes").
func StartRedis(tb testing.TB, extraArgs ...string) *Redis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH: install it (apt-get install redis-server) or run `make test`, which does")
	}
	dir := tb.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	args := append([]string{"--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--bind", "127.0.0.1"}, extraArgs...)
	cmd := exec.Command(bin, args...)
	out, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	r := &Redis{URL: "unix://" + sock, Sock: sock, Dir: dir, cmd: cmd}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = out.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			fmt.Fprintf(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return r
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			tb.Fatalf("redis-server did not come up: %s", log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// NATS is a running embedded nats-server with JetStream.
type NATS struct {
	Server *server.Server
	URL    string
	Dir    string
}

// StartNATS starts an embedded JetStream server listening on a free
// 127.0.0.1 port with file storage in a temp dir.
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	dir := tb.TempDir()
	return StartNATSAt(tb, dir, -1)
}

// StartNATSAt starts an embedded JetStream server with its store in dir on
// the given port (-1 for a free one). Used to restart a server on its data.
func StartNATSAt(tb testing.TB, dir string, port int) *NATS {
	tb.Helper()
	s, err := server.NewServer(&server.Options{
		ServerName: "test",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		tb.Fatalf("nats-server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		tb.Fatalf("nats-server not ready")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return &NATS{Server: s, URL: s.ClientURL(), Dir: dir}
}

// Connect opens a client connection and a JetStream context, closed at cleanup.
func (n *NATS) Connect(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
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

// Eventually polls cond every 10ms until it returns true or timeout passes.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
