package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a process a test can SIGKILL and start again with the same
// command line: the same port and the same data directory.
type proc struct {
	name  string
	bin   string
	args  []string
	log   string
	ready func() error

	mu   sync.Mutex
	cmd  *exec.Cmd
	logf *os.File
	done chan struct{}
}

func (s *proc) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("%s is already running (pid %d)", s.name, s.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s starting at %s\n", s.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.logf, s.done = cmd, logf, done
	return nil
}

// waitReady polls ready until it succeeds, the process exits or timeout.
func (s *proc) waitReady(timeout time.Duration) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = s.ready(); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting: %s", s.name, tailOf(s.log, 2000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%v): %s", s.name, timeout, err, tailOf(s.log, 2000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process and waits until it is gone.
func (s *proc) kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("%s is not running", s.name)
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies on SIGKILL too, but be explicit
	_ = s.cmd.Process.Kill()
	<-s.done
	fmt.Fprintf(s.logf, "=== %s killed at %s\n", s.name, time.Now().Format(time.RFC3339Nano))
	_ = s.logf.Close()
	s.cmd, s.logf, s.done = nil, nil, nil
	return nil
}

// signal sends sig to the running process.
func (s *proc) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("%s is not running", s.name)
	}
	fmt.Fprintf(s.logf, "=== %s sent %s at %s\n", s.name, sig, time.Now().Format(time.RFC3339Nano))
	return s.cmd.Process.Signal(sig)
}

func (s *proc) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *proc) stopAtCleanup(tb testing.TB) {
	tb.Cleanup(func() {
		s.mu.Lock()
		running := s.cmd != nil
		s.mu.Unlock()
		if running {
			_ = s.kill()
		}
	})
}

func tailOf(path string, n int) string {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// NATSServer is a nats-server process with JetStream on a fixed loopback
// port and store directory, which a test can SIGKILL and start again on
// the same port and data (StartNATSProcess cannot be restarted).
type NATSServer struct {
	URL     string
	Port    int
	Monitor int // HTTP monitoring port (/healthz)
	Dir     string
	Log     string
	s       *proc
}

// StartNATSServer builds nats-server from the module (NATSServerBin) and
// runs it with -js on free loopback ports, its store in a temp dir. It is
// killed at cleanup. extraArgs go to nats-server.
func StartNATSServer(tb testing.TB, extraArgs ...string) *NATSServer {
	tb.Helper()
	bin := NATSServerBin(tb)
	dir := tb.TempDir()
	n := &NATSServer{Port: freePort(tb), Monitor: freePort(tb), Dir: dir, Log: filepath.Join(dir, "nats.log")}
	n.URL = fmt.Sprintf("nats://127.0.0.1:%d", n.Port)
	args := append([]string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-m", strconv.Itoa(n.Monitor),
		"-sd", filepath.Join(dir, "js"), "-n", "chaos"}, extraArgs...)
	n.s = &proc{name: "nats-server", bin: bin, args: args, log: n.Log, ready: n.healthy}
	n.s.stopAtCleanup(tb)
	if err := n.Start(); err != nil {
		tb.Fatal(err)
	}
	return n
}

// healthy asks the monitoring endpoint, which answers 200 only once
// JetStream has recovered its streams.
func (n *NATSServer) healthy() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.Monitor))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// Start starts the server (again) and waits until JetStream is healthy.
func (n *NATSServer) Start() error {
	if err := n.s.start(); err != nil {
		return err
	}
	return n.s.waitReady(30 * time.Second)
}

// Kill SIGKILLs the server: no flush, no snapshot, like a node that dies.
func (n *NATSServer) Kill() error { return n.s.kill() }

// Restart kills the server, waits pause, and starts it on the same port
// and store.
func (n *NATSServer) Restart(pause time.Duration) error {
	if err := n.Kill(); err != nil {
		return err
	}
	time.Sleep(pause)
	return n.Start()
}

// Pid is the running server's process id, 0 when it is down.
func (n *NATSServer) Pid() int { return n.s.pid() }

// Pause freezes the server with SIGSTOP for d, then lets it go on.
func (n *NATSServer) Pause(d time.Duration) error {
	if err := n.s.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return n.s.signal(syscall.SIGCONT)
}

// RedisServer is a redis-server process on a fixed loopback TCP port with
// its data directory, which a test can SIGKILL and start again on the same
// port and data. By default it persists every write before answering
// (--appendonly yes --appendfsync always), so a restart loses nothing that
// was acknowledged.
type RedisServer struct {
	URL  string // redis://127.0.0.1:PORT/0
	Addr string
	Port int
	Dir  string
	Log  string
	s    *proc
}

// StartRedisServer runs redis-server on a free loopback port with the AOF
// on and fsynced at every write, in a temp dir, killed at cleanup.
// extraArgs go to redis-server after the defaults (they may override them).
func StartRedisServer(tb testing.TB, extraArgs ...string) *RedisServer {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH: install it (apt-get install redis-server) or run `make test`, which does")
	}
	dir := tb.TempDir()
	r := &RedisServer{Port: freePort(tb), Dir: dir, Log: filepath.Join(dir, "redis.log")}
	r.Addr = fmt.Sprintf("127.0.0.1:%d", r.Port)
	r.URL = "redis://" + r.Addr + "/0"
	args := append([]string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always"}, extraArgs...)
	r.s = &proc{name: "redis-server", bin: bin, args: args, log: r.Log, ready: r.ping}
	r.s.stopAtCleanup(tb)
	if err := r.Start(); err != nil {
		tb.Fatal(err)
	}
	return r
}

// ping succeeds once the server answers PONG (not LOADING while it
// replays its AOF).
func (r *RedisServer) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := fmt.Fprintf(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

// Start starts the server (again) and waits until it answers PING.
func (r *RedisServer) Start() error {
	if err := r.s.start(); err != nil {
		return err
	}
	return r.s.waitReady(30 * time.Second)
}

// Kill SIGKILLs the server.
func (r *RedisServer) Kill() error { return r.s.kill() }

// Restart kills the server, waits pause, and starts it on the same port
// and data directory; it replays its AOF.
func (r *RedisServer) Restart(pause time.Duration) error {
	if err := r.Kill(); err != nil {
		return err
	}
	time.Sleep(pause)
	return r.Start()
}

// Pid is the running server's process id, 0 when it is down.
func (r *RedisServer) Pid() int { return r.s.pid() }

// Pause freezes the server with SIGSTOP for d, then lets it go on: a
// stall (a VM pause, a slow disk under appendfsync always) in which
// clients time out while their connections stay open.
func (r *RedisServer) Pause(d time.Duration) error {
	if err := r.s.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	time.Sleep(d)
	return r.s.signal(syscall.SIGCONT)
}
