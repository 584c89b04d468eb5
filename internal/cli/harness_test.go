package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/cli"
	"github.com/durable-run/durable/internal/demo/devenv"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 jetstream: the reconnect watcher of an async publisher
		// (Object Store puts) can start on a nil status channel and block forever.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// The embedded nats-server and go-redis keep background goroutines
		// that end shortly after their owners are closed.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// storeKinds are the checkpoint stores the CLI runs against.
var storeKinds = []string{"kv", "redis"}

// forEachStore runs fn as a subtest per store kind.
func forEachStore(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) { fn(t, newEnv(t, kind)) })
	}
}

// env is one isolated deployment: the dev environment's embedded NATS and
// payments API, a store (JetStream KV or a redis-server of its own) and an
// in-process worker running the reference workflows. The CLI under test
// reaches it through --nats (and --redis).
type env struct {
	t        *testing.T
	kind     string
	natsURL  string
	redisURL string
	pay      payments.Client
	js       jetstream.JetStream
	store    checkpoint.Store

	stopWorker func()
}

func newEnv(t *testing.T, kind string) *env {
	t.Helper()
	de, err := devenv.Start(devenv.Config{Dir: t.TempDir(), NATSPort: -1, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("devenv: %v", err)
	}
	t.Cleanup(func() {
		// The workers' idle keep-alive connections to the payments API
		// first: one dialed for a request that was cancelled never sent a
		// request, and the server's Shutdown waits 5 s for such a
		// connection before it counts as idle (the close then ran out of
		// time under load).
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := de.Close(); err != nil {
			t.Errorf("devenv close: %v", err)
		}
	})
	// Connection settings come from flags only; nothing from the outer
	// environment may redirect the CLI.
	for _, k := range []string{"DURABLE_NATS_URL", "DURABLE_REDIS_URL", "DURABLE_KV_BUCKET", "DURABLE_REPLICAS", "DURABLE_CRASH", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"} {
		t.Setenv(k, "")
	}
	t.Setenv("DURABLE_PAYMENTS_URL", de.PaymentsURL())

	e := &env{t: t, kind: kind, natsURL: de.NATSURL, pay: payments.Client{BaseURL: de.PaymentsURL()}}
	nc, err := nats.Connect(de.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	e.js = js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch kind {
	case "kv":
		// The CLI's default bucket.
		st, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "durable"})
		if err != nil {
			t.Fatal(err)
		}
		e.store = st
	case "redis":
		r := testenv.StartRedis(t)
		e.redisURL = r.URL
		opt, err := redis.ParseURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		// The CLI's default (empty) key prefix.
		e.store = redisstore.New(rdb, redisstore.Options{})
	default:
		t.Fatalf("unknown store %q", kind)
	}

	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	blobs, err := objstore.New(ctx, js, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(worker.Config{JetStream: js, Store: e.store, Registry: cli.ReferenceWorkflows(),
		Concurrency: 8, AckWait: 2 * time.Second, DrainTimeout: 3 * time.Second, Logger: &log, Blobs: blobs})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	stopped := false
	e.stopWorker = func() {
		if stopped {
			return
		}
		stopped = true
		wcancel()
		if err := <-done; err != nil {
			t.Errorf("worker.Run: %v", err)
		}
	}
	t.Cleanup(e.stopWorker)
	testenv.WaitWorkflows(t, e.store, 10*time.Second, cli.ReferenceWorkflows().Names()...)
	return e
}

// result of one CLI invocation.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// cli runs `durable args... --nats URL [--redis URL]` in-process.
func (e *env) cli(args ...string) result {
	e.t.Helper()
	args = append(append([]string(nil), args...), "--nats", e.natsURL)
	if e.redisURL != "" {
		args = append(args, "--redis", e.redisURL)
	}
	return runCLI(args...)
}

// runCLI runs durable with exactly args.
func runCLI(args ...string) result {
	var out, errb bytes.Buffer
	code := cli.Main(args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustCLI runs the CLI and fails the test unless it exits with want.
func (e *env) mustCLI(want int, args ...string) result {
	e.t.Helper()
	r := e.cli(args...)
	if r.code != want {
		e.t.Fatalf("durable %s: want exit %d, got %s", strings.Join(args, " "), want, r)
	}
	return r
}

func (e *env) getRun(id string) (checkpoint.Run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return e.store.GetRun(ctx, id)
}

func (e *env) mustRun(id string) checkpoint.Run {
	e.t.Helper()
	r, err := e.getRun(id)
	if err != nil {
		e.t.Fatalf("get run %s: %v", id, err)
	}
	return r
}

func (e *env) checkpoints(id string) []checkpoint.Checkpoint {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cps, err := e.store.Checkpoints(ctx, id)
	if err != nil {
		e.t.Fatalf("checkpoints of %s: %v", id, err)
	}
	return cps
}

// waitStatus polls the store until run id has status want.
func (e *env) waitStatus(id string, want checkpoint.Status) checkpoint.Run {
	e.t.Helper()
	var last checkpoint.Run
	testenv.Eventually(e.t, 20*time.Second, "run "+id+" "+string(want), func() bool {
		r, err := e.getRun(id)
		if err == nil {
			last = r
		}
		return err == nil && r.Status == want
	})
	return last
}

// startParked starts a claim and waits until it parks at step 5 for approval.
func (e *env) startParked(id string) checkpoint.Run {
	e.t.Helper()
	e.mustCLI(0, "start", "claim", "--id", id)
	r := e.waitStatus(id, checkpoint.StatusWaiting)
	if r.Step != 5 || r.Wait == nil || r.Wait.Step != 5 {
		e.t.Fatalf("run %s parked at step %d (wait %+v), want step 5", id, r.Step, r.Wait)
	}
	return r
}

// showJSON decodes `runs show RUN --json` into a map, so field names are
// checked exactly as DESIGN.md writes them.
func (e *env) showJSON(id string) map[string]any {
	e.t.Helper()
	r := e.mustCLI(0, "runs", "show", id, "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		e.t.Fatalf("runs show --json is not a JSON object: %v\n%s", err, r.stdout)
	}
	return m
}

// listJSON decodes `runs list [args] --json` into a slice of maps.
func (e *env) listJSON(args ...string) []map[string]any {
	e.t.Helper()
	r := e.mustCLI(0, append(append([]string{"runs", "list"}, args...), "--json")...)
	var l []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
		e.t.Fatalf("runs list --json is not a JSON array: %v\n%s", err, r.stdout)
	}
	return l
}

func (e *env) paymentsFor(id string) []payments.Payment {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps, err := e.pay.List(ctx, payments.WithRunID(id))
	if err != nil {
		e.t.Fatalf("list payments: %v", err)
	}
	return ps
}

// assertUnchanged fails if run id's record or checkpoints moved since before.
func (e *env) assertUnchanged(id string, before checkpoint.Run, beforeCPs []checkpoint.Checkpoint) {
	e.t.Helper()
	after := e.mustRun(id)
	if after.Rev != before.Rev || !after.UpdatedAt.Equal(before.UpdatedAt) || after.Status != before.Status ||
		after.Step != before.Step || after.Resumes != before.Resumes || len(after.Approvals) != len(before.Approvals) {
		e.t.Fatalf("run %s changed:\nbefore %+v\nafter  %+v", id, before, after)
	}
	cps := e.checkpoints(id)
	if len(cps) != len(beforeCPs) {
		e.t.Fatalf("run %s: %d checkpoints, had %d", id, len(cps), len(beforeCPs))
	}
	for i := range cps {
		if cps[i].Step != beforeCPs[i].Step || cps[i].Attempt != beforeCPs[i].Attempt || !cps[i].At.Equal(beforeCPs[i].At) {
			e.t.Fatalf("run %s: checkpoint %d changed: %+v -> %+v", id, cps[i].Step, beforeCPs[i], cps[i])
		}
	}
}

// barrier starts a fresh claim and waits until it parks. Step messages are
// consumed in stream order, so once it has parked the worker has seen every
// step message published before it.
func (e *env) barrier(id string) {
	e.t.Helper()
	e.startParked(id)
}
