package approver_test

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// The binaries as an operator runs them: `durable token create` writes the
// token file, `approver` serves it, a decision over HTTP resumes a run on
// a worker, and SIGTERM stops the approver cleanly.
func TestApproverProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	durableBin := testenv.DurableBin(t)
	approverBin := testenv.Binary(t, "github.com/durable-run/durable/cmd/approver")
	n := testenv.StartNATS(t)
	r := testenv.StartRedis(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens.json")

	var tokOut, tokErr bytes.Buffer
	create := exec.Command(durableBin, "token", "create", "--file", tokenFile, "--id", "ana", "--groups", "adjusters,claims")
	create.Stdout, create.Stderr = &tokOut, &tokErr
	if err := create.Run(); err != nil {
		t.Fatalf("token create: %v\n%s", err, tokErr.String())
	}
	token := strings.TrimSpace(tokOut.String())
	if !strings.HasPrefix(token, "dur_") || strings.Contains(token, "\n") || strings.Contains(tokErr.String(), token) {
		t.Fatalf("token create printed %q (stderr %q)", tokOut.String(), tokErr.String())
	}
	if raw, _ := os.ReadFile(tokenFile); strings.Contains(string(raw), token) {
		t.Fatal("the token file holds the token")
	}
	if out, err := exec.Command(durableBin, "token", "create", "--file", tokenFile, "--id", "ana", "--groups", "x").CombinedOutput(); err == nil {
		t.Fatalf("a second token for ana: %s", out)
	}
	secrets := filepath.Join(dir, "secrets.json")
	if err := os.WriteFile(secrets, []byte(`{"erp": {"secret": "erp-secret-0123456789abcdef", "groups": ["adjusters"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	// A worker on the same NATS and Redis (the default key prefix, as the
	// binary uses).
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	store := redisstore.New(rdb, redisstore.Options{})
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	w, err := worker.New(worker.Config{JetStream: js, Store: store, Registry: steps.NewRegistry().MustRegister(approvalFlow()), AckWait: 2 * time.Second, DrainTimeout: 3 * time.Second, Logger: &log})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	t.Cleanup(func() { wstop(); <-wdone })

	port := freePort(t)
	logs := &testenv.Buffer{}
	proc := exec.Command(approverBin, "--http", fmt.Sprintf("127.0.0.1:%d", port), "--tokens", tokenFile, "--event-secrets", secrets, "--four-eyes")
	proc.Env = append(os.Environ(), "DURABLE_NATS_URL="+n.URL, "DURABLE_REDIS_URL="+r.URL)
	proc.Stdout, proc.Stderr = logs, logs
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proc.Wait() }()
	t.Cleanup(func() {
		_ = proc.Process.Kill()
		<-exited
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testenv.Eventually(t, 15*time.Second, "approver /healthz", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	testenv.Eventually(t, 10*time.Second, "workflows registered", func() bool {
		infos, err := store.Workflows(context.Background())
		return err == nil && len(infos) >= 1
	})
	cl := client.New(js, store)
	if _, _, err := cl.Start(context.Background(), client.StartRequest{Workflow: "approval", RunID: "claim-p", By: "someone"}); err != nil {
		t.Fatal(err)
	}
	var run checkpoint.Run
	testenv.Eventually(t, 20*time.Second, "claim-p waiting", func() bool {
		run, err = store.GetRun(context.Background(), "claim-p")
		return err == nil && run.Status == checkpoint.StatusWaiting
	})
	req, _ := http.NewRequest(http.MethodPost, base+"/api/approvals/claim-p/approve", strings.NewReader(decision(run.Wait.PayloadSHA256, 1, "")))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var res approver.DecisionResult
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != 200 || res.By != "ana" {
		t.Fatalf("approve: %d %+v\n%s", resp.StatusCode, res, logs.String())
	}
	testenv.Eventually(t, 20*time.Second, "claim-p completed", func() bool {
		run, err = store.GetRun(context.Background(), "claim-p")
		return err == nil && run.Status == checkpoint.StatusCompleted
	})

	if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("approver exited with %v:\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("approver did not stop on SIGTERM:\n%s", logs.String())
	}
	out := logs.String()
	if !strings.Contains(out, "approver stopped") || !strings.Contains(out, "consuming approval and signal events") || strings.Contains(out, token) {
		t.Errorf("approver log:\n%s", out)
	}
	exited <- nil // for the cleanup

	// Without --tokens it refuses to start, with exit code 2.
	noTokens := exec.Command(approverBin, "--nats", n.URL)
	if out, err := noTokens.CombinedOutput(); err == nil || noTokens.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "--tokens") {
		t.Errorf("approver without --tokens: %v %s", err, out)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
