package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
)

// buildExample builds examples/<name>, a module of its own on durable's
// public packages, as its README tells a user to.
func buildExample(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "..", "examples", name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cd examples/%s && go build: %v\n%s", name, err, out)
	}
	return bin
}

// devUp starts `durable dev` with args and waits until it serves httpAddr.
func devUp(t *testing.T, httpAddr string, args ...string) *devProcess {
	t.Helper()
	dev := startDev(t, testenv.DurableBin(t), args...)
	testenv.Eventually(t, 30*time.Second, "durable dev up", func() bool {
		if dev.exited() {
			t.Fatalf("durable dev exited early: %v\n%s", dev.waitEr, dev.out)
		}
		c, err := net.DialTimeout("tcp", httpAddr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil && strings.Contains(dev.out.String(), "durable dev is up")
	})
	return dev
}

// startExampleWorker starts an example's worker binary on natsURL, its
// output to log, killed when the test ends.
func startExampleWorker(t *testing.T, bin, natsURL string, log *testenv.Buffer, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "--nats", natsURL, "--ack-wait", "2s")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// The expense example against `durable dev`: its worker is SIGKILLed while
// a run waits for a manager; another takes over and, once approved, pays
// the amount exactly once. An amount of 100 or less pays without asking; a
// rejection pays nothing.
func TestExpenseExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example module and runs it against durable dev")
	}
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_PAYMENTS_URL"} {
		t.Setenv(k, "")
	}
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)
	expense := buildExample(t, "expense")
	natsPort, httpPort := freePort(t), freePort(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", httpPort)
	devUp(t, httpAddr, "--data", filepath.Join(t.TempDir(), "data"), "--nats-port", fmt.Sprint(natsPort), "--http", httpAddr, "--workers", "1")
	pay := payments.Client{BaseURL: "http://" + httpAddr + "/demo/payments"}
	cliAt := func(a ...string) result { return runCLI(append(a, "--nats", natsURL)...) }
	status := func(id string) string {
		r := cliAt("runs", "show", id, "--json")
		var v struct{ Status string }
		_ = json.Unmarshal([]byte(r.stdout), &v)
		return v.Status
	}
	paid := func(id string) []payments.Payment {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ps, err := pay.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []payments.Payment
		for _, p := range ps {
			if p.RunID == id {
				out = append(out, p)
			}
		}
		return out
	}

	workerLog := &testenv.Buffer{}
	startWorker := func() *exec.Cmd {
		return startExampleWorker(t, expense, natsURL, workerLog, "DURABLE_PAYMENTS_URL="+pay.BaseURL)
	}
	first := startWorker()

	// The first start may come before the worker registered the workflow.
	testenv.Eventually(t, 20*time.Second, "expense started", func() bool {
		return cliAt("start", "expense", "--id", "exp-big", "--input", `{"amount": 250}`).code == 0
	})
	testenv.Eventually(t, 20*time.Second, "exp-big waiting", func() bool { return status("exp-big") == "waiting" })
	r := cliAt("runs", "show", "exp-big", "--json")
	if !strings.Contains(r.stdout, `"managers"`) {
		t.Errorf("exp-big waits for no approval by managers:\n%s", r.stdout)
	}
	if err := first.Process.Kill(); err != nil { // SIGKILL while the run is parked
		t.Fatal(err)
	}
	_ = first.Wait()
	startWorker()
	if r := cliAt("approve", "exp-big", "--by", "maria"); r.code != 0 {
		t.Fatalf("approve: %s", r)
	}
	testenv.Eventually(t, 30*time.Second, "exp-big completed", func() bool { return status("exp-big") == "completed" })
	if ps := paid("exp-big"); len(ps) != 1 || ps[0].Amount != 250 || ps[0].Key != "exp-big:step2" {
		t.Fatalf("exp-big: want one payment of 250 with key exp-big:step2, got %+v\nworker log:\n%s", ps, workerLog)
	}

	if r := cliAt("start", "expense", "--id", "exp-small", "--input", `{"amount": 40}`); r.code != 0 {
		t.Fatalf("start exp-small: %s", r)
	}
	testenv.Eventually(t, 30*time.Second, "exp-small completed", func() bool { return status("exp-small") == "completed" })
	if ps := paid("exp-small"); len(ps) != 1 || ps[0].Amount != 40 {
		t.Fatalf("exp-small: want one payment of 40, got %+v", ps)
	}

	if r := cliAt("start", "expense", "--id", "exp-no", "--input", `{"amount": 900}`); r.code != 0 {
		t.Fatalf("start exp-no: %s", r)
	}
	testenv.Eventually(t, 20*time.Second, "exp-no waiting", func() bool { return status("exp-no") == "waiting" })
	if r := cliAt("approve", "exp-no", "--by", "maria", "--reject", "--reason", "not a business trip"); r.code != 0 {
		t.Fatalf("reject: %s", r)
	}
	testenv.Eventually(t, 30*time.Second, "exp-no failed", func() bool { return status("exp-no") == "failed" })
	if ps := paid("exp-no"); len(ps) != 0 {
		t.Fatalf("exp-no was rejected and paid %+v", ps)
	}
}
