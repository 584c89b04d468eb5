package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

var storeKinds = []string{"redis", "kv"}

// harness is one isolated deployment: its own nats-server and store.
type harness struct {
	t      testing.TB
	nc     *nats.Conn
	js     jetstream.JetStream
	store  checkpoint.Store
	client *client.Client
}

var prefixSeq atomic.Int64

func newHarness(t testing.TB, kind string) *harness {
	t.Helper()
	return newHarnessOn(t, kind, testenv.StartNATS(t).URL)
}

// newHarnessOn uses the NATS server at url (a separate process when the
// test measures the worker's own memory).
func newHarnessOn(t testing.TB, kind, url string) *harness {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, nc: nc, js: js}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch kind {
	case "redis":
		r := testenv.StartRedis(t)
		opt, err := redis.ParseURL(r.URL)
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(opt)
		t.Cleanup(func() { _ = rdb.Close() })
		h.store = redisstore.New(rdb, redisstore.Options{Prefix: fmt.Sprintf("t%d", prefixSeq.Add(1))})
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "durable"})
		if err != nil {
			t.Fatal(err)
		}
		h.store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	h.client = client.New(js, h.store)
	return h
}

// startWorker runs a worker until the test ends (or stop is called).
func (h *harness) startWorker(reg *steps.Registry, mod func(*worker.Config)) (w *worker.Worker, stop func()) {
	h.t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(h.t)).Level(zerolog.WarnLevel)
	cfg := worker.Config{JetStream: h.js, Store: h.store, Registry: reg, Concurrency: 8, AckWait: 2 * time.Second, DrainTimeout: 3 * time.Second, Logger: &log}
	if mod != nil {
		mod(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("worker.Run: %v", err)
		}
	}
	h.t.Cleanup(stop)
	// Wait for registration so Start finds the workflows.
	testenv.Eventually(h.t, 10*time.Second, "workflows registered", func() bool {
		infos, err := h.store.Workflows(context.Background())
		return err == nil && len(infos) >= len(reg.Names())
	})
	return w, stop
}

func (h *harness) start(workflow, id, input string) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := h.client.Start(ctx, client.StartRequest{Workflow: workflow, RunID: id, Input: []byte(input)}); err != nil {
		h.t.Fatalf("start %s: %v", id, err)
	}
}

func (h *harness) waitStatus(id string, want checkpoint.Status, timeout time.Duration) checkpoint.Run {
	h.t.Helper()
	var run checkpoint.Run
	testenv.Eventually(h.t, timeout, fmt.Sprintf("%s %s", id, want), func() bool {
		r, err := h.store.GetRun(context.Background(), id)
		run = r
		return err == nil && r.Status == want
	})
	return run
}

func (h *harness) checkpoints(id string) []checkpoint.Checkpoint {
	h.t.Helper()
	cps, err := h.store.Checkpoints(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return cps
}

// assertContiguous checks checkpoints 1..n with no gap.
func assertContiguous(t testing.TB, cps []checkpoint.Checkpoint, n int) {
	t.Helper()
	if len(cps) != n {
		t.Fatalf("%d checkpoints, want %d", len(cps), n)
	}
	for i, cp := range cps {
		if cp.Step != i+1 {
			t.Fatalf("checkpoint %d has step %d", i+1, cp.Step)
		}
	}
}

// counter is a test workflow's state.
type counter struct {
	N     int      `json:"n"`
	Trail []string `json:"trail,omitempty"`
}

// pipeline is a fixed 3-step workflow.
func pipeline() *steps.Workflow[counter] {
	add := func(next string) steps.StepFunc[counter] {
		return func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			st.N++
			st.Trail = append(st.Trail, s.StepName())
			if next == "" {
				return steps.Complete(st), nil
			}
			return steps.Next(next, st), nil
		}
	}
	return steps.New[counter]("pipeline", 1).
		Step("one", add("two")).
		Step("two", add("three")).
		Step("three", add(""))
}

func joinTrail(st counter) string { return strings.Join(st.Trail, ",") }
