// Package proc starts and supervises the processes that tests and
// `durable bench` run on loopback: redis-server, nats-server (a process of
// the binary built from the module, or embedded in this one) and durable's
// own binaries.
//
// A Proc is one command line that can be started, SIGKILLed, frozen and
// started again with the same arguments, so the same ports and data; each
// start logs to a file of its own, and a child dies with the process that
// started it. The package takes no testing.TB, so the bench uses it too;
// internal/test/testenv wraps it for tests (temp dirs, cleanup, t.Fatal).
package proc

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config is the command line of a Proc.
type Config struct {
	// Name names the process in errors and its logs: Dir/Name.<start>.log,
	// where start counts from 1.
	Name string
	// Path is the binary; Args are its arguments.
	Path string
	Args []string
	// Env is added to this process's environment (a later entry wins).
	Env []string
	// Dir holds the logs. Required.
	Dir string
	// Restart starts the process again whenever it ends, until Stop: at
	// once after Kill, half a second later when it ended on its own (a
	// service whose server is down and refuses to start is no crash loop
	// at full speed). Off: it stays down until Start.
	Restart bool
}

// restartDelay is how long Restart waits after a process ended on its own.
const restartDelay = 500 * time.Millisecond

// Exit is an end of a process that neither Kill nor Stop caused.
type Exit struct {
	Proc   string
	Gen    int    // which start of the process: 1 for the first
	Status string // "exit 1", "signal killed"
	At     time.Time
	Tail   string // the last lines of its log
}

func (e Exit) String() string {
	return fmt.Sprintf("%s (gen %d) %s at %s: %s", e.Proc, e.Gen, e.Status, e.At.Format("15:04:05.000"), strings.ReplaceAll(e.Tail, "\n", " | "))
}

// Proc is a supervised process: see the package comment.
type Proc struct {
	cfg Config

	mu      sync.Mutex
	cur     *run // nil while the process is down
	last    *run // the latest start
	gen     int
	logs    []string
	exits   []Exit
	stopped chan struct{} // closed by Stop: no more restarts
	wg      sync.WaitGroup
}

// run is one start of the process.
type run struct {
	cmd     *exec.Cmd
	gen     int
	log     string
	started time.Time
	killed  bool // by Kill or Stop: its end is no Exit
	frozen  bool
	done    chan struct{} // closed once it has ended
}

// New prepares a process; Start starts it.
func New(cfg Config) *Proc {
	return &Proc{cfg: cfg, stopped: make(chan struct{})}
}

// Name is the process's name.
func (p *Proc) Name() string { return p.cfg.Name }

// Start starts the process; it is an error if it runs.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		return fmt.Errorf("%s already runs (pid %d)", p.cfg.Name, p.cur.cmd.Process.Pid)
	}
	select {
	case <-p.stopped:
		p.stopped = make(chan struct{})
	default:
	}
	return p.startLocked()
}

func (p *Proc) startLocked() error {
	p.gen++
	log := filepath.Join(p.cfg.Dir, fmt.Sprintf("%s.%d.log", p.cfg.Name, p.gen))
	logf, err := os.Create(log)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.cfg.Name, err)
	}
	cmd := exec.Command(p.cfg.Path, p.cfg.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), p.cfg.Env...)
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.cfg.Name, err)
	}
	r := &run{cmd: cmd, gen: p.gen, log: log, started: time.Now(), done: make(chan struct{})}
	p.cur, p.last = r, r
	p.logs = append(p.logs, log)
	p.wg.Add(1)
	go p.wait(r, logf)
	return nil
}

// wait records how r ended and, with Restart, starts the process again.
func (p *Proc) wait(r *run, logf *os.File) {
	defer p.wg.Done()
	err := r.cmd.Wait()
	logf.Close()
	p.mu.Lock()
	if p.cur == r {
		p.cur = nil
	}
	killed, stopped := r.killed, p.stopped
	if !killed {
		p.exits = append(p.exits, Exit{Proc: p.cfg.Name, Gen: r.gen, Status: ExitStatus(r.cmd, err), At: time.Now(), Tail: LastLines(r.log, 5)})
	}
	close(r.done)
	p.mu.Unlock()
	if !p.cfg.Restart {
		return
	}
	if !killed {
		select {
		case <-time.After(restartDelay):
		case <-stopped:
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-stopped:
		return
	default:
	}
	if p.cur != nil {
		return
	}
	if err := p.startLocked(); err != nil {
		p.exits = append(p.exits, Exit{Proc: p.cfg.Name, Gen: p.gen, Status: "not started again: " + err.Error(), At: time.Now()})
	}
}

// Kill SIGKILLs the process and waits until it is gone: no flush, no
// shutdown, like a machine that dies. It refuses a process that is not
// running, is frozen, or is being killed. With Restart the process starts
// again at once.
func (p *Proc) Kill() error {
	p.mu.Lock()
	r := p.cur
	switch {
	case r == nil:
		p.mu.Unlock()
		return fmt.Errorf("%s is not running", p.cfg.Name)
	case r.frozen:
		p.mu.Unlock()
		return fmt.Errorf("%s is frozen", p.cfg.Name)
	case r.killed:
		p.mu.Unlock()
		return fmt.Errorf("%s is being killed", p.cfg.Name)
	}
	r.killed = true
	_ = r.cmd.Process.Kill()
	p.mu.Unlock()
	<-r.done
	return nil
}

// Stop ends the process and its restarts: SIGTERM (after a SIGCONT, so a
// frozen process can die), then SIGKILL once grace has passed, at once
// when grace is 0. It returns when the process is gone, with an error when
// it had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	p.mu.Lock()
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
	}
	r := p.cur
	if r != nil {
		r.killed = true
		if grace > 0 {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
		} else {
			_ = r.cmd.Process.Kill()
		}
	}
	p.mu.Unlock()
	var err error
	switch {
	case r == nil:
	case grace == 0:
		<-r.done
	default:
		select {
		case <-r.done:
		case <-time.After(grace):
			_ = r.cmd.Process.Kill()
			<-r.done
			err = fmt.Errorf("%s did not stop on SIGTERM within %s: killed", p.cfg.Name, grace)
		}
	}
	p.wg.Wait()
	return err
}

// StopAll stops the processes together: each gets its grace at the same
// time. It returns their errors joined.
func StopAll(grace time.Duration, procs ...*Proc) []error {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.Stop(grace)
		}()
	}
	wg.Wait()
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Freeze SIGSTOPs the process and returns its pid: it keeps its
// connections and its work but does nothing until Thaw. It refuses a
// process that is not running, is frozen, or is being killed.
func (p *Proc) Freeze() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.cur
	if r == nil || r.frozen || r.killed {
		return 0, fmt.Errorf("%s cannot be frozen: not running, frozen or being killed", p.cfg.Name)
	}
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return 0, fmt.Errorf("freeze %s: %w", p.cfg.Name, err)
	}
	r.frozen = true
	return r.cmd.Process.Pid, nil
}

// Thaw SIGCONTs the process frozen as pid, if it still runs.
func (p *Proc) Thaw(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.cur; r != nil && r.cmd.Process.Pid == pid {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		r.frozen = false
	}
}

// Pause freezes the process for d, then lets it go on: a stall (a VM
// pause, a slow disk) in which its clients time out while their
// connections stay open.
func (p *Proc) Pause(d time.Duration) error {
	pid, err := p.Freeze()
	if err != nil {
		return err
	}
	time.Sleep(d)
	p.Thaw(pid)
	return nil
}

// WaitReady polls ready until it succeeds, the latest start of the
// process ends, or ctx ends.
func (p *Proc) WaitReady(ctx context.Context, ready func() error) error {
	p.mu.Lock()
	r := p.last
	p.mu.Unlock()
	if r == nil {
		return fmt.Errorf("%s was never started", p.cfg.Name)
	}
	begin := time.Now()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-r.done:
			return fmt.Errorf("%s exited while starting: %s", p.cfg.Name, LastLines(r.log, 10))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %v\n%s", p.cfg.Name, time.Since(begin).Round(time.Millisecond), err, LastLines(r.log, 10))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Running reports whether the process runs.
func (p *Proc) Running() bool { return p.Pid() != 0 }

// Pid is the running process's id, 0 when it is down.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.cmd.Process.Pid
}

// Uptime is how long the running process has run, 0 when it is down.
func (p *Proc) Uptime() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return time.Since(p.cur.started)
}

// Log is the log of the current (or last) start, "" before the first.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.logs) == 0 {
		return ""
	}
	return p.logs[len(p.logs)-1]
}

// Logs are the logs of every start, the first first.
func (p *Proc) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logs...)
}

// Exits are the ends of the process that neither Kill nor Stop caused.
func (p *Proc) Exits() []Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Exit(nil), p.exits...)
}

// ExitStatus says how a process ended: "signal killed", "exit 1", or err
// when it never ran.
func ExitStatus(cmd *exec.Cmd, err error) string {
	if cmd.ProcessState == nil {
		return fmt.Sprint(err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", cmd.ProcessState.ExitCode())
}

// LastLines is the last n lines of the file at path ("" when unreadable),
// e.g. a process's log for a failure message.
func LastLines(path string, n int) string {
	fh, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer fh.Close()
	var lines []string
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
