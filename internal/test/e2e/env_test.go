package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/demo/examples/reference"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

// fleet is a deployment for process tests: NATS and payments in this
// process, the store, and worker processes supervised by the test.
type fleet struct {
	t        testing.TB
	dir      string
	nats     *testenv.NATS
	redisURL string
	store    checkpoint.Store
	client   *client.Client
	payURL   string
	crash    string

	mu      sync.Mutex
	procs   map[int]*proc
	next    int
	kills   int
	stopped bool
	wg      sync.WaitGroup
}

type proc struct {
	n   int
	cmd *exec.Cmd
	log string
}

func newFleet(t *testing.T, kind, crash string) *fleet {
	t.Helper()
	f := &fleet{t: t, dir: t.TempDir(), crash: crash, procs: map[int]*proc{}}
	f.nats = testenv.StartNATS(t)
	_, js := f.nats.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch kind {
	case "redis":
		r := testenv.StartRedis(t)
		f.redisURL = r.URL
		opt, err := redis.ParseURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		f.store = redisstore.New(rdb, redisstore.Options{})
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f.store = st
	}
	f.client = client.New(js, f.store)

	pay, err := payments.Open(filepath.Join(f.dir, "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/demo/payments/", http.StripPrefix("/demo/payments", pay.Handler()))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	f.payURL = "http://" + lis.Addr().String() + "/demo/payments"
	t.Cleanup(func() {
		f.stopAll()
		_ = srv.Close()
		_ = pay.Close()
	})
	return f
}

// startWorker starts worker process n (restarting it after a kill until
// the fleet stops).
func (f *fleet) startWorker() {
	f.mu.Lock()
	f.next++
	n := f.next
	f.mu.Unlock()
	f.wg.Add(1)
	go f.supervise(n)
}

func (f *fleet) supervise(n int) {
	defer f.wg.Done()
	for gen := 1; ; gen++ {
		f.mu.Lock()
		if f.stopped {
			f.mu.Unlock()
			return
		}
		logPath := filepath.Join(f.dir, fmt.Sprintf("worker-%d.%d.log", n, gen))
		args := []string{"worker", "--nats", f.nats.URL, "--ack-wait", "2s", "--concurrency", "4", "--drain-timeout", "1s"}
		if f.redisURL != "" {
			args = append(args, "--redis", f.redisURL)
		}
		cmd := exec.Command(testenv.DurableBin(f.t), args...)
		logf, err := os.Create(logPath)
		if err != nil {
			f.mu.Unlock()
			f.t.Error(err)
			return
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "DURABLE_CRASH="+f.crash, "DURABLE_PAYMENTS_URL="+f.payURL, "DURABLE_LOG_LEVEL=info")
		if err := cmd.Start(); err != nil {
			f.mu.Unlock()
			f.t.Error(err)
			return
		}
		f.procs[n] = &proc{n: n, cmd: cmd, log: logPath}
		f.mu.Unlock()
		err = cmd.Wait()
		_ = logf.Close()
		f.mu.Lock()
		delete(f.procs, n)
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			f.kills++
		} else if !f.stopped {
			f.t.Logf("worker %d exited: %v", n, err)
		}
		f.mu.Unlock()
	}
}

func (f *fleet) stopAll() {
	f.mu.Lock()
	f.stopped = true
	for _, p := range f.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	f.mu.Unlock()
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		f.mu.Lock()
		for _, p := range f.procs {
			_ = p.cmd.Process.Kill()
		}
		f.mu.Unlock()
		<-done
	}
}

func (f *fleet) killCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills
}

// waitKills waits up to timeout for want workers to have been killed and
// returns how many were.
func (f *fleet) waitKills(want int, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		got := f.killCount()
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killHung SIGKILLs the worker whose log says it hangs in run:step and
// returns whether one was found.
func (f *fleet) killHung(run string, step int) bool {
	marker := fmt.Sprintf("durable-fault: hang run=%s step=%d ", run, step)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		fh, err := os.Open(p.log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		found := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), marker) {
				found = true
			}
		}
		fh.Close()
		if found {
			_ = p.cmd.Process.Kill()
			return true
		}
	}
	return false
}

func (f *fleet) waitRegistered() {
	f.t.Helper()
	testenv.WaitWorkflows(f.t, f.store, 60*time.Second, reference.Workflows().Names()...)
}

// drive approves runs as they park until all ids are terminal.
func (f *fleet) drive(ids []string, timeout time.Duration, each func()) {
	f.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for {
		done := 0
		for _, id := range ids {
			run, err := f.store.GetRun(ctx, id)
			if err != nil {
				f.t.Fatalf("get %s: %v", id, err)
			}
			if run.Status == checkpoint.StatusWaiting {
				if _, err := f.client.Decide(ctx, client.Decision{RunID: id, By: "adjuster-test", Channel: client.ChannelCLI}); err != nil {
					f.t.Logf("approve %s: %v", id, err)
				}
			}
			if run.Status.Terminal() {
				done++
			}
		}
		if each != nil {
			each()
		}
		if done == len(ids) {
			return
		}
		if time.Now().After(deadline) {
			f.dumpLogs()
			f.t.Fatalf("runs not finished after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fleet) dumpLogs() {
	paths, _ := filepath.Glob(filepath.Join(f.dir, "worker-*.log"))
	for _, p := range paths {
		b, _ := os.ReadFile(p)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		f.t.Logf("--- %s (tail)\n%s", filepath.Base(p), b)
	}
}
