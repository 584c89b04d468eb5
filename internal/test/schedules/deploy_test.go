package schedules

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/schedule"
)

// deployment is one store's servers and services, all processes on
// 127.0.0.1 but the payments API, and the test's view of them.
type deployment struct {
	t    *testing.T
	kind string
	dir  string // the processes' logs
	bin  string
	conn []string // connection flags of every command
	env  []string

	store     checkpoint.Store
	schedules *schedule.Store
	pay       payments.Client

	worker     *fleet.Service
	schedulers []*fleet.Service
}

// deploy starts nats-server (and for the redis kind redis-server) as
// processes, the payments API the claims pay through, one worker and two
// schedulers of the reference binary, and waits until they are ready
// and the claim workflow is registered. Everything stops at cleanup.
func deploy(t *testing.T, kind string) *deployment {
	t.Helper()
	d := &deployment{t: t, kind: kind, dir: logDir(t), bin: testenv.DurableBin(t)}
	n := testenv.StartNATSServer(t)
	_, js := n.Connect(t)
	d.conn = []string{"--nats", n.URL}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	switch kind {
	case "redis":
		r := testenv.StartRedisServer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		d.store = redisstore.New(rdb, redisstore.Options{}) // the services' prefix
		d.conn = append(d.conn, "--redis", "redis://"+r.Addr)
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{}) // the services' bucket
		if err != nil {
			t.Fatal(err)
		}
		d.store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	d.pay = payments.Client{BaseURL: servePayments(t, d.dir), HTTP: &http.Client{Timeout: 5 * time.Second}}
	d.env = []string{"DURABLE_LOG_LEVEL=info", "DURABLE_PAYMENTS_URL=" + d.pay.BaseURL,
		"ANTHROPIC_API_KEY=", "OPENAI_API_KEY=", "DURABLE_CRASH=",
		// Connection settings come from the flags alone.
		"DURABLE_NATS_URL=", "DURABLE_REDIS_URL=", "DURABLE_KV_BUCKET=", "DURABLE_REPLICAS="}

	d.worker = d.service("worker", "worker", "--ack-wait", "2s", "--concurrency", "8", "--drain-timeout", "1s")
	for i := range 2 {
		d.schedulers = append(d.schedulers, d.service(fmt.Sprintf("scheduler-%d", i+1), "scheduler"))
	}
	for _, s := range d.services() {
		if err := s.WaitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitWorkflows(t, d.store, 30*time.Second, "claim")
	st, err := schedule.NewStore(ctx, js, schedule.StoreOptions{}) // the bucket the schedulers created
	if err != nil {
		t.Fatal(err)
	}
	d.schedules = st
	return d
}

// logDir keeps the processes' logs: in a temp dir removed at the end, or
// with DURABLE_SCHEDULES_KEEP=1 in one that stays.
func logDir(t *testing.T) string {
	if os.Getenv("DURABLE_SCHEDULES_KEEP") == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "durable-schedules-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("logs kept in %s", dir)
	return dir
}

// service starts a process of the reference binary with the connection
// flags and a metrics address (its /readyz); it is stopped (SIGTERM,
// SIGKILL after 10s) at cleanup.
func (d *deployment) service(name, command string, args ...string) *fleet.Service {
	d.t.Helper()
	port, err := proc.FreePort(0)
	if err != nil {
		d.t.Fatal(err)
	}
	s := &fleet.Service{Metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	s.Proc = proc.New(proc.Config{Name: name, Path: d.bin, Args: slices.Concat([]string{command}, d.conn, args, []string{"--metrics", s.Metrics}), Env: d.env, Dir: d.dir})
	d.t.Cleanup(func() { _ = s.Stop(10 * time.Second) })
	if err := s.Start(); err != nil {
		d.t.Fatal(err)
	}
	return s
}

func (d *deployment) services() []*fleet.Service {
	return append([]*fleet.Service{d.worker}, d.schedulers...)
}

// servePayments serves the demo payments API on loopback, its records in
// dir, and returns its URL.
func servePayments(t *testing.T, dir string) string {
	t.Helper()
	pay, err := payments.Open(filepath.Join(dir, "payments.jsonl"))
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
	t.Cleanup(func() {
		_ = srv.Close()
		_ = pay.Close()
	})
	return "http://" + lis.Addr().String() + "/demo/payments"
}

// result is how a command of the binary ended.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("durable %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// cli runs `durable args... <connection flags>` as an operator would.
func (d *deployment) cli(args ...string) result {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, slices.Concat(args, d.conn)...)
	cmd.Env = append(os.Environ(), d.env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	r := result{args: args}
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		d.t.Fatalf("durable %s: %v", strings.Join(args, " "), err)
	}
	r.stdout, r.stderr = stdout.String(), stderr.String()
	return r
}

// cliJSON runs a command that must exit 0 and decodes its stdout.
func (d *deployment) cliJSON(into any, args ...string) {
	d.t.Helper()
	r := d.cli(args...)
	if r.code != 0 {
		d.t.Fatalf("want exit 0: %s", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), into); err != nil {
		d.t.Fatalf("%v: %s", err, r)
	}
}

// fired is one "schedule fired" line of a scheduler's log.
type fired struct {
	By        string    // scheduler-N.gen
	Schedule  string    `json:"schedule"`
	At        time.Time `json:"fire"`
	RunID     string    `json:"run_id"`
	Result    string    `json:"result"`
	Cancelled string    `json:"cancelled"`
	Reason    string    `json:"reason"`
}

// fires reads the fires the schedulers logged, each start's log.
func (d *deployment) fires() []fired {
	d.t.Helper()
	var out []fired
	for _, s := range d.schedulers {
		for gen, path := range s.Logs() {
			f, err := os.Open(path)
			if err != nil {
				d.t.Fatal(err)
			}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				var line struct {
					Message string `json:"message"`
					fired
				}
				if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "schedule fired" {
					line.By = fmt.Sprintf("%s.%d", s.Name(), gen+1)
					out = append(out, line.fired)
				}
			}
			f.Close()
		}
	}
	return out
}

// waitFor polls cond every 200ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout.Round(time.Second), what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
