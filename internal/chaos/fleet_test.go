package chaos

import (
	"bufio"
	"encoding/json"
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

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// exit is a process exit the suite did not cause.
type exit struct {
	member string
	gen    int
	status string
	at     time.Time
	tail   string
}

// member is one supervised durable process (a worker, a scheduler, the
// approver): restarted whenever it ends until the fleet stops.
type member struct {
	name string
	args []string
	env  []string
	dir  string

	mu       sync.Mutex
	cmd      *exec.Cmd
	gen      int
	log      string
	started  time.Time
	frozen   bool // SIGSTOPped
	killing  bool // the suite sent SIGKILL
	stopping bool
	kills    int
	exits    []exit
	done     chan struct{}
}

// fleetProcs supervises the durable processes.
type fleetProcs struct {
	t       testing.TB
	bin     string
	members []*member
	wg      sync.WaitGroup
}

func (f *fleetProcs) add(name string, args, env []string, dir string) *member {
	m := &member{name: name, args: args, env: env, dir: dir, done: make(chan struct{})}
	f.members = append(f.members, m)
	f.wg.Add(1)
	go f.supervise(m)
	return m
}

func (f *fleetProcs) supervise(m *member) {
	defer f.wg.Done()
	defer close(m.done)
	for {
		m.mu.Lock()
		if m.stopping {
			m.mu.Unlock()
			return
		}
		m.gen++
		m.log = filepath.Join(m.dir, fmt.Sprintf("%s.%d.log", m.name, m.gen))
		logf, err := os.Create(m.log)
		if err != nil {
			m.mu.Unlock()
			f.t.Error(err)
			return
		}
		cmd := exec.Command(f.bin, m.args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), m.env...)
		if err := cmd.Start(); err != nil {
			m.mu.Unlock()
			logf.Close()
			f.t.Error(err)
			return
		}
		m.cmd, m.started, m.frozen = cmd, time.Now(), false
		gen, log := m.gen, m.log
		m.mu.Unlock()

		err = cmd.Wait()
		logf.Close()

		m.mu.Lock()
		m.cmd = nil
		killed := m.killing
		m.killing = false
		if killed {
			m.kills++
		} else if !m.stopping {
			m.exits = append(m.exits, exit{member: m.name, gen: gen, status: testenv.ExitStatus(cmd, err), at: time.Now(), tail: testenv.LastLines(log, 3)})
		}
		stopping := m.stopping
		m.mu.Unlock()
		if stopping {
			return
		}
		if !killed {
			// Not a crash loop at full speed: a process that refuses to
			// start (its server is down) tries again shortly.
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// kill SIGKILLs the member's process if it runs and is not frozen; the
// supervisor starts it again at once.
func (m *member) kill() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.frozen || m.killing || m.stopping {
		return false
	}
	m.killing = true
	_ = m.cmd.Process.Kill()
	return true
}

// freeze SIGSTOPs the member's process and returns its pid and log.
func (m *member) freeze() (pid int, log string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.frozen || m.killing || m.stopping {
		return 0, "", false
	}
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, "", false
	}
	m.frozen = true
	return m.cmd.Process.Pid, m.log, true
}

// thaw SIGCONTs the process frozen with pid, if it is still the one running.
func (m *member) thaw(pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil && m.cmd.Process.Pid == pid {
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		m.frozen = false
	}
}

// pid is the running process's id, 0 when none runs.
func (m *member) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

func (m *member) uptime() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return time.Since(m.started)
}

func (m *member) unexpected() []exit {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]exit(nil), m.exits...)
}

// stopAll ends every member: SIGCONT (a frozen process must be able to
// die), SIGTERM, then SIGKILL after a grace period.
func (f *fleetProcs) stopAll() {
	for _, m := range f.members {
		m.mu.Lock()
		m.stopping = true
		if m.cmd != nil {
			_ = m.cmd.Process.Signal(syscall.SIGCONT)
			_ = m.cmd.Process.Signal(syscall.SIGTERM)
		}
		m.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(10 * time.Second):
	}
	for _, m := range f.members {
		m.mu.Lock()
		if m.cmd != nil {
			f.t.Logf("%s did not stop on SIGTERM within 10s: killed", m.name)
			_ = m.cmd.Process.Kill()
		}
		m.mu.Unlock()
	}
	<-done
}

// logLine is the part of a worker's JSON log line the suite reads.
type logLine struct {
	Message string `json:"message"`
	RunID   string `json:"run_id"`
	Step    int    `json:"step"`
	Attempt int    `json:"attempt"`
}

// scanLogs calls fn for every JSON line of the files matching glob, with
// the file and the line's byte offset.
func scanLogs(glob string, fn func(path string, off int64, l logLine)) {
	paths, _ := filepath.Glob(glob)
	for _, p := range paths {
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		var off int64
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			b := sc.Bytes()
			var l logLine
			if json.Unmarshal(b, &l) == nil {
				fn(p, off, l)
			}
			off += int64(len(b)) + 1
		}
		fh.Close()
	}
}
