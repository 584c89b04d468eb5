package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// devProcess is `durable dev` running as a child process.
type devProcess struct {
	cmd    *exec.Cmd
	out    *testenv.Buffer
	done   chan struct{}
	waitEr error
}

// startDev runs `durable dev` and waits until its NATS port accepts
// connections. It is killed at cleanup if still running.
func startDev(t *testing.T, bin string, args ...string) *devProcess {
	t.Helper()
	p := &devProcess{out: &testenv.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"dev"}, args...)...)
	// Nothing from the outer environment: the dev process must find its
	// payments API and store by itself.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DURABLE_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, "DURABLE_LOG_LEVEL=warn")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start durable dev: %v", err)
	}
	go func() { p.waitEr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *devProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and wants a clean exit 0.
func (p *devProcess) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to durable dev: %v\n%s", sig, err, p.out)
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("durable dev did not exit within 20s of %v\n%s", sig, p.out)
	}
	if p.waitEr != nil {
		var ee *exec.ExitError
		if errors.As(p.waitEr, &ee) {
			t.Fatalf("durable dev exited with %d after %v, want 0\n%s", ee.ExitCode(), sig, p.out)
		}
		t.Fatalf("durable dev: %v\n%s", p.waitEr, p.out)
	}
}

// `durable dev` as a whole: a real process with embedded NATS, KV store,
// a worker and the payments API; a claim goes through it with the CLI, and
// runs and payments survive a SIGTERM and a restart on the same data dir.
func TestDevEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs durable dev as a process")
	}
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_PAYMENTS_URL"} {
		t.Setenv(k, "")
	}
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	bin := testenv.DurableBin(t)
	data := filepath.Join(t.TempDir(), "data")
	natsPort, httpPort := freePort(t), freePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	args := []string{"--data", data, "--nats-port", fmt.Sprint(natsPort), "--http", httpAddr, "--workers", "1"}
	pay := payments.Client{BaseURL: "http://" + httpAddr + "/demo/payments"}
	cliAt := func(a ...string) result { return runCLI(append(a, "--nats", natsURL)...) }

	up := func(p *devProcess) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, "durable dev accepting NATS connections", func() bool {
			if p.exited() {
				t.Fatalf("durable dev exited early: %v\n%s", p.waitEr, p.out)
			}
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", natsPort), time.Second)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
		testenv.Eventually(t, 10*time.Second, "the dev banner", func() bool {
			return strings.Contains(p.out.String(), "durable dev is up")
		})
		for _, want := range []string{natsURL, "http://" + httpAddr + "/demo/payments", "1 in-process"} {
			if !strings.Contains(p.out.String(), want) {
				t.Errorf("durable dev banner does not mention %q:\n%s", want, p.out)
			}
		}
	}
	listPayments := func() []payments.Payment {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ps, err := pay.List(ctx)
		if err != nil {
			t.Fatalf("GET %s: %v", pay.BaseURL, err)
		}
		return ps
	}
	show := func(id string) map[string]any {
		r := cliAt("runs", "show", id, "--json")
		var v map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
			return nil
		}
		return v
	}
	status := func(id string) string {
		s, _ := show(id)["status"].(string)
		return s
	}

	dev := startDev(t, bin, args...)
	up(dev)

	const id = "claim-dev-1"
	// The worker registers the claim workflow shortly after the banner; a
	// start repeated with the same id is harmless.
	var last result
	testenv.Eventually(t, 15*time.Second, "start accepted", func() bool {
		last = cliAt("start", "claim", "--id", id)
		return last.code == 0
	})
	testenv.Eventually(t, 20*time.Second, id+" parked", func() bool { return status(id) == "waiting" })
	if r := cliAt("approve", id, "--by", "ana"); r.code != 0 {
		t.Fatalf("approve: %s", r)
	}
	testenv.Eventually(t, 20*time.Second, id+" completed", func() bool { return status(id) == "completed" })
	ps := listPayments()
	if len(ps) != 1 || ps[0].Key != id+":step6" || ps[0].RunID != id || ps[0].Amount != 1840 {
		t.Fatalf("payments after the claim: want one for %s:step6, got %+v", id, ps)
	}
	// The exact path of the contract, without a trailing slash.
	resp, err := http.Get("http://" + httpAddr + "/demo/payments")
	if err != nil {
		t.Fatal(err)
	}
	var l payments.List
	err = json.NewDecoder(resp.Body).Decode(&l)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || l.Count != 1 || len(l.Payments) != 1 {
		t.Errorf("GET /demo/payments: status %d, err %v, %+v", resp.StatusCode, err, l)
	}
	// The dev token reads runs (it is an operator), and the token file
	// is followed while dev runs: a token created works, a revoked one
	// stops working, without a restart.
	if !strings.Contains(dev.out.String(), "/runs") {
		t.Errorf("the banner does not point at the runs pages:\n%s", dev.out)
	}
	devTok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		t.Fatal(err)
	}
	getRun := func(tok string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+httpAddr+"/api/runs/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := getRun(strings.TrimSpace(string(devTok))); code != http.StatusOK {
		t.Errorf("GET /api/runs/%s with the dev token: %d, want 200", id, code)
	}
	tokFile := filepath.Join(data, "tokens.json")
	r := runCLI("token", "create", "--file", tokFile, "--id", "pat", "--groups", "operators")
	if r.code != 0 {
		t.Fatalf("token create: %s", r)
	}
	patTok := strings.TrimSpace(r.stdout)
	testenv.Eventually(t, 10*time.Second, "the new token accepted without a restart", func() bool { return getRun(patTok) == http.StatusOK })
	if r := runCLI("token", "revoke", "--file", tokFile, "--id", "pat"); r.code != 0 {
		t.Fatalf("token revoke: %s", r)
	}
	testenv.Eventually(t, 10*time.Second, "the revoked token refused without a restart", func() bool { return getRun(patTok) == http.StatusUnauthorized })
	dev.stop(t, syscall.SIGTERM)

	dev = startDev(t, bin, args...)
	up(dev)
	if got := listPayments(); len(got) != 1 || got[0].ID != ps[0].ID || got[0].Key != ps[0].Key {
		t.Errorf("payments after a restart: want %+v, got %+v", ps, got)
	}
	v := show(id)
	if v["status"] != "completed" {
		t.Errorf("run %s after a restart: status %v", id, v["status"])
	}
	if cps, _ := v["checkpoints"].([]any); len(cps) != 9 {
		t.Errorf("run %s after a restart: %d checkpoints", id, len(cps))
	}
	if apps, _ := v["approvals"].([]any); len(apps) != 1 {
		t.Errorf("run %s after a restart: approvals %v", id, v["approvals"])
	}
	if r := cliAt("runs", "show", id); r.code != 0 || !strings.Contains(r.stdout, "completed") || !strings.Contains(r.stdout, id+":step6") {
		t.Errorf("runs show after a restart: %s", r)
	}
	// Starting the same claim again pays nothing more.
	if r := cliAt("start", "claim", "--id", id); r.code != 0 || !strings.Contains(r.stdout, "already exists") {
		t.Errorf("start the completed claim again after a restart: %s", r)
	}
	if got := listPayments(); len(got) != 1 {
		t.Errorf("payments after a repeated start: %+v", got)
	}
	dev.stop(t, os.Interrupt) // Ctrl-C stops it as cleanly as SIGTERM
}

// A taken --http address is a clear error, not a hang: dev gives up before
// it waits for a signal.
func TestDevHTTPAddressInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("DURABLE_REDIS_URL", "")
	done := make(chan result, 1)
	go func() {
		done <- runCLI("dev", "--data", t.TempDir(), "--nats-port", "-1", "--http", l.Addr().String(), "--workers", "0")
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.stderr, l.Addr().String()) || !strings.Contains(r.stderr, "--http") {
			t.Errorf("dev on a taken --http address: want exit 1 naming it and --http, got %s", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev on a taken --http address did not give up within 30s")
	}
}
