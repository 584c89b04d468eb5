package approver_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium (Debian's chromium package) driven over
// the DevTools protocol by chromedp, killed at cleanup.
type browser struct {
	t   testing.TB
	ctx context.Context // one tab; bounded by the whole browser's budget
}

// newBrowser starts Chromium with a fresh profile. Every action of the
// test, and the browser itself, ends within budget: a hung browser fails
// the test instead of hanging it. On failure a screenshot of the tab is
// saved in the test's artifact directory (kept with go test -artifacts).
func newBrowser(t *testing.T, budget time.Duration) *browser {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found on PATH: install chromium (make test does; Debian: apt-get install chromium)")
	}
	shots := t.ArtifactDir() // a temp dir like t.TempDir, kept with go test -artifacts
	// A fresh profile, and a home for what Chromium keeps outside it (the
	// crash handler's database): nothing is written outside the test's
	// temp dir, which is removed after the browser is killed (cleanups
	// run last-in first-out).
	home := t.TempDir()
	profile := filepath.Join(home, "profile")
	logPath := filepath.Join(shots, "chromium.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1200, 900),
		// This network refuses everything but the loopback: keep Chromium
		// from reaching for Google's hosts, and resolve no name at all.
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Env("XDG_CONFIG_HOME="+filepath.Join(home, "config"), "XDG_CACHE_HOME="+filepath.Join(home, "cache")),
		chromedp.CombinedOutput(out),
	)
	budgetCtx, cancelBudget := context.WithTimeout(context.Background(), budget)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(budgetCtx, opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // kills Chromium and waits for it
		cancelBudget()
		_ = out.Close()
		// Chromium's helpers (zygote, network service, crash handler)
		// must die with it.
		deadline := time.Now().Add(5 * time.Second)
		for pids := processesOf(home); len(pids) > 0; pids = processesOf(home) {
			if time.Now().After(deadline) {
				t.Errorf("chromium processes %v outlived the browser; killing them", pids)
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	b := &browser{t: t, ctx: ctx}
	// The first action starts the browser, which lives as long as ctx.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		log, _ := os.ReadFile(logPath)
		t.Fatalf("start %s: %v; its output ends:\n%s", bin, err, log[max(0, len(log)-4000):])
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		t.Logf("chromium's output: %s", logPath)
		shot, err := b.run(10*time.Second, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
		path := filepath.Join(shots, "inbox.png")
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Logf("write screenshot: %v", err)
			return
		}
		t.Logf("screenshot of the page: %s (kept with go test -artifacts)", path)
	})
	return b
}

// processesOf lists the processes whose command line names dir: Chromium
// passes --user-data-dir to each of its helpers, and the crash handler
// gets its database under XDG_CONFIG_HOME.
func processesOf(dir string) []int {
	want := []byte(dir)
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		// Helpers rewrite their command line with spaces between the arguments.
		for rest := cmdline; ; {
			i := bytes.Index(rest, want)
			if i < 0 {
				break
			}
			rest = rest[i+len(want):]
			if len(rest) == 0 || rest[0] == 0 || rest[0] == ' ' || rest[0] == '/' {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// run runs one action within timeout.
func (b *browser) run(timeout time.Duration, a chromedp.Action[[]byte]) ([]byte, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// do runs actions in order within timeout and fails the test with what
// it was doing and the page's status line when one does not succeed.
func (b *browser) do(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (page status: %q)", what, err, b.status())
	}
}

// logIn opens the page at url and saves token in it, as a person pastes
// it into the page's token field.
func (b *browser) logIn(url, who, token string) {
	b.t.Helper()
	b.do("open "+url, 20*time.Second,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.ID("token")),
	)
	b.do("log in with "+who+"'s token", 10*time.Second,
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("save-token")),
	)
}

// text is the visible text of the first element matching sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v (page status: %q)", sel, err, b.status())
	}
	return s
}

// waitText waits until the first element matching sel shows want.
func (b *browser) waitText(sel, want string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	var last string
	for {
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err == nil && strings.TrimSpace(s) == want {
			return
		}
		last = s
		select {
		case <-ctx.Done():
			b.t.Fatalf("%s shows %q, want %q (page status: %q)", sel, last, want, b.status())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// status is the page's status line, for failure messages.
func (b *browser) status() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.ID("status")))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return s
}
