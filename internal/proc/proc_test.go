package proc_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/proc"
)

// sh is a Proc running script with /bin/sh, its logs in a temp dir,
// stopped at cleanup.
func sh(t *testing.T, restart bool, script string) *proc.Proc {
	t.Helper()
	p := proc.New(proc.Config{Name: "sh", Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Restart: restart})
	t.Cleanup(func() { _ = p.Stop(0) })
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Without Restart a killed process stays down until Start, which starts
// it again with a log of its own; a kill is no exit to report.
func TestKillAndStart(t *testing.T) {
	p := sh(t, false, "echo up; exec sleep 60")
	pid := p.Pid()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after Kill")
	}
	if err := p.Kill(); err == nil {
		t.Error("Kill of a process that is down succeeded")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err == nil {
		t.Error("Start of a running process succeeded")
	}
	if p.Pid() == 0 || p.Pid() == pid {
		t.Fatalf("pid %d after a start again of pid %d", p.Pid(), pid)
	}
	logs := p.Logs()
	if len(logs) != 2 || !strings.HasSuffix(logs[1], "sh.2.log") {
		t.Fatalf("logs %v, want sh.1.log and sh.2.log", logs)
	}
	waitFor(t, "the second start's log", func() bool { b, _ := os.ReadFile(logs[1]); return string(b) == "up\n" })
	if x := p.Exits(); len(x) != 0 {
		t.Errorf("exits %v, want none: the test caused them", x)
	}
}

// With Restart a killed process starts again at once; one that ends on
// its own is reported, with its status and its log's last lines, and
// started again.
func TestRestart(t *testing.T) {
	p := sh(t, true, "exec sleep 60")
	pid := p.Pid()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a start after the kill", func() bool { return p.Pid() != 0 && p.Pid() != pid })
	if x := p.Exits(); len(x) != 0 {
		t.Errorf("exits %v after a kill", x)
	}

	crash := sh(t, true, "echo boom; exit 3")
	waitFor(t, "two ends of its own", func() bool { return len(crash.Exits()) >= 2 })
	x := crash.Exits()[0]
	if x.Gen != 1 || x.Status != "exit 3" || x.Tail != "boom" || !strings.Contains(x.String(), "sh (gen 1) exit 3 at ") {
		t.Errorf("exit %+v (%s)", x, x)
	}
	if err := crash.Stop(time.Second); err != nil {
		t.Fatal(err)
	}
	n := len(crash.Logs())
	time.Sleep(700 * time.Millisecond)
	if crash.Running() || len(crash.Logs()) != n {
		t.Error("started again after Stop")
	}
}

// A frozen process can't be killed (the chaos suite's zombie must wake
// up) or frozen twice; Thaw lets it go on and Stop ends it even frozen.
func TestFreeze(t *testing.T) {
	p := sh(t, true, "exec sleep 60")
	pid, err := p.Freeze()
	if err != nil || pid != p.Pid() {
		t.Fatalf("Freeze = %d, %v; pid %d", pid, err, p.Pid())
	}
	if err := p.Kill(); err == nil {
		t.Error("Kill of a frozen process succeeded")
	}
	if _, err := p.Freeze(); err == nil {
		t.Error("Freeze of a frozen process succeeded")
	}
	p.Thaw(pid)
	if _, err := p.Freeze(); err != nil {
		t.Fatalf("Freeze after Thaw: %v", err)
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop of a frozen process: %v", err)
	}
	if p.Running() || len(p.Exits()) != 0 {
		t.Errorf("after Stop: running %t, exits %v", p.Running(), p.Exits())
	}
}

// Stop kills what does not end on SIGTERM within its grace, and says so.
func TestStopKillsAfterGrace(t *testing.T) {
	p := sh(t, false, "trap '' TERM; while :; do sleep 0.05; done")
	time.Sleep(100 * time.Millisecond) // the trap is set
	err := p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not stop on SIGTERM") {
		t.Fatalf("Stop = %v, want that it had to kill", err)
	}
}

// WaitReady gives up when the process ends, with its log.
func TestWaitReady(t *testing.T) {
	p := sh(t, false, "echo cannot start; exit 1")
	err := p.WaitReady(context.Background(), func() error { return context.DeadlineExceeded })
	if err == nil || !strings.Contains(err.Error(), "exited while starting") || !strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("WaitReady = %v", err)
	}
	q := sh(t, false, "exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.WaitReady(ctx, func() error { return context.DeadlineExceeded }); err == nil || !strings.Contains(err.Error(), "not ready after") {
		t.Fatalf("WaitReady = %v", err)
	}
	if err := q.WaitReady(context.Background(), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}
