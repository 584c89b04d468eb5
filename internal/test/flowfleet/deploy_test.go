package flowfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/flow"
)

// workerPkg is the worker process the tests run (testdata/worker).
const workerPkg = "github.com/durable-run/durable/internal/test/flowfleet/testdata/worker"

// deployment is one store's servers, worker processes and fake provider.
type deployment struct {
	t       *testing.T
	kind    string
	dir     string
	js      jetstream.JetStream
	store   checkpoint.Store
	client  *client.Client
	limits  *flow.Store
	prov    *provider
	workers []*proc.Proc
}

// limits are the concurrency limits of "model" a deployment sets before
// its workers start.
type limits struct {
	all    int // over all keys
	perKey int // for each fairness key (the tenant); 0: none
}

// deploy starts nats-server (and redis-server for kind "redis") as
// processes on 127.0.0.1, the fake provider, lim on "model", and n
// worker processes of `concurrency` steps each; it waits until the
// workflow is registered. Everything stops at cleanup.
func deploy(t *testing.T, kind string, lim limits, n, concurrency int, delay func() time.Duration) *deployment {
	t.Helper()
	d := &deployment{t: t, kind: kind, dir: t.TempDir()}
	bin := testenv.Binary(t, workerPkg)
	nats := testenv.StartNATSServer(t)
	_, js := nats.Connect(t)
	d.js = js
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := []string{"-nats", nats.URL}
	switch kind {
	case "redis":
		r := testenv.StartRedisServer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		d.store = redisstore.New(rdb, redisstore.Options{}) // the workers' prefix
		args = append(args, "-redis", r.URL)
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{}) // the workers' bucket
		if err != nil {
			t.Fatal(err)
		}
		d.store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	d.client = client.New(js, d.store)
	fs, err := flow.NewStore(ctx, js, flow.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.SetConcurrency(ctx, "model", lim.all, "flowfleet-test"); err != nil {
		t.Fatal(err)
	}
	if lim.perKey > 0 {
		if _, err := fs.SetConcurrencyPerKey(ctx, "model", lim.perKey, "flowfleet-test"); err != nil {
			t.Fatal(err)
		}
	}
	d.limits = fs
	d.prov = startProvider(t, lim, delay)
	args = append(args, "-provider", d.prov.URL, "-concurrency", fmt.Sprint(concurrency))
	for i := range n {
		w := proc.New(proc.Config{Name: fmt.Sprintf("worker-%d", i+1), Path: bin, Args: args, Dir: d.dir})
		t.Cleanup(func() { _ = w.Stop(5 * time.Second) })
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		d.workers = append(d.workers, w)
	}
	testenv.WaitWorkflows(t, d.store, 30*time.Second, "agent")
	return d
}

// start starts run id of the agent workflow.
func (d *deployment) start(id, tenant string, turns int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := map[string]any{"tenant": tenant, "turns": turns}
	if _, _, err := d.client.Start(ctx, client.StartRequest{Workflow: "agent", RunID: id, Input: in}); err != nil {
		d.t.Fatalf("start %s: %v", id, err)
	}
}

// waitCompleted waits until every run of ids has completed and returns
// them as stored; a run that failed or went dead fails the test at once.
func (d *deployment) waitCompleted(ids []string, timeout time.Duration) map[string]checkpoint.Run {
	d.t.Helper()
	out := map[string]checkpoint.Run{}
	deadline := time.Now().Add(timeout)
	for _, id := range ids {
		for {
			r, err := d.store.GetRun(context.Background(), id)
			if err == nil && r.Status == checkpoint.StatusCompleted {
				out[id] = r
				break
			}
			if err == nil && (r.Status == checkpoint.StatusFailed || r.Status == checkpoint.StatusDead) {
				d.t.Fatalf("run %s %s: %s", id, r.Status, r.Error)
			}
			if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
				d.t.Fatal(err)
			}
			if time.Now().After(deadline) {
				d.t.Fatalf("%s: run %s not completed after %s (%d of %d were)", d.kind, id, timeout, len(out), len(ids))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return out
}

// checkLogs: no worker but killed ended on its own, and none logged an
// error.
func (d *deployment) checkLogs() {
	d.t.Helper()
	for _, w := range d.workers {
		for _, e := range w.Exits() {
			d.t.Errorf("%s: a worker ended on its own: %s", d.kind, e)
		}
		for _, path := range w.Logs() {
			b, err := os.ReadFile(path)
			if err != nil {
				d.t.Fatal(err)
			}
			for line := range strings.Lines(string(b)) {
				if strings.Contains(line, `"level":"error"`) {
					d.t.Errorf("%s: %s: %s", d.kind, w.Name(), strings.TrimSpace(line))
				}
			}
		}
	}
}
