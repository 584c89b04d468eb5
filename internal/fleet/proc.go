package fleet

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/testenv"
)

// Proc is one process of the fleet, started and SIGKILLed by the test,
// started again with the same command line (ports, data directory). Each
// start writes a log of its own: <dir>/<name>.<generation>.log.
type Proc struct {
	Name string
	bin  string
	args []string
	env  []string
	dir  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	gen     int
	log     string
	logs    []string
	killing bool
	done    chan struct{}
	exits   []Exit
}

// Exit is a process end the test did not cause.
type Exit struct {
	Proc   string
	Gen    int
	Status string
	At     time.Time
	Tail   string
}

// NewProc prepares a process; it starts with Start. It is stopped (SIGTERM,
// then SIGKILL after 10s) at cleanup.
func NewProc(tb testing.TB, name, dir, bin string, args, env []string) *Proc {
	p := &Proc{Name: name, bin: bin, args: args, env: env, dir: dir}
	tb.Cleanup(p.Stop)
	return p
}

// Start starts the process; it is an error if it already runs.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s already runs (pid %d)", p.Name, p.cmd.Process.Pid)
	}
	p.gen++
	p.log = filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.Name, p.gen))
	logf, err := os.Create(p.log)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), p.env...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.killing = cmd, done, false
	p.logs = append(p.logs, p.log)
	gen, log := p.gen, p.log
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		if !p.killing {
			p.exits = append(p.exits, Exit{Proc: p.Name, Gen: gen, Status: testenv.ExitStatus(cmd, err), At: time.Now(), Tail: testenv.LastLines(log, 5)})
		}
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Kill SIGKILLs the process and waits until it is gone: no flush, no
// shutdown, like a machine that dies.
func (p *Proc) Kill() error { return p.signalAndWait(syscall.SIGKILL, 0) }

// Stop ends the process if it runs: SIGTERM, SIGKILL after 10s.
func (p *Proc) Stop() { _ = p.signalAndWait(syscall.SIGTERM, 10*time.Second) }

func (p *Proc) signalAndWait(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	if cmd == nil {
		p.mu.Unlock()
		if sig == syscall.SIGKILL {
			return fmt.Errorf("%s is not running", p.Name)
		}
		return nil
	}
	p.killing = true
	_ = cmd.Process.Signal(sig)
	p.mu.Unlock()
	if grace > 0 {
		select {
		case <-done:
			return nil
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
	return nil
}

// Pid is the running process's id, 0 when it is down.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Log is the current (or last) generation's log file.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log
}

// Logs are the log files of every generation.
func (p *Proc) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logs...)
}

// Exits are the ends of the process the test did not cause.
func (p *Proc) Exits() []Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Exit(nil), p.exits...)
}

// waitReady polls ready until it succeeds, the process exits or timeout.
func (p *Proc) waitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting: %s", p.Name, testenv.LastLines(p.Log(), 10))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v\n%s", p.Name, timeout, err, testenv.LastLines(p.Log(), 10))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort is a free loopback port; with bus, port+10000 is free too (a
// Redis Cluster node's bus port).
func freePort(tb testing.TB, bus bool) int {
	tb.Helper()
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !bus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			continue
		}
		_ = b.Close()
		return port
	}
	tb.Fatal("no free loopback port")
	return 0
}
