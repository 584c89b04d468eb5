// Package testfleet runs an in-process deployment for tests: a real
// nats-server (embedded), a real store (redis-server or JetStream KV),
// workers and schedulers, all stopped at cleanup.
package testfleet

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Kinds of store a fleet can use.
var Kinds = []string{"redis", "kv"}

// Fleet is one isolated deployment.
type Fleet struct {
	T      testing.TB
	URL    string
	NC     *nats.Conn
	JS     jetstream.JetStream
	Store  checkpoint.Store
	Client *client.Client
	// Redis and RedisPrefix are the redis store's client and key prefix,
	// for tests that write records as an earlier version did; nil and ""
	// on the KV store.
	Redis       *redis.Client
	RedisPrefix string
}

var prefixSeq atomic.Int64

// New starts NATS and the store of the given kind.
func New(t testing.TB, kind string) *Fleet {
	t.Helper()
	return NewOn(t, kind, testenv.StartNATS(t).URL)
}

// NewOn uses the NATS server at url (a separate process when a test
// measures this process's own memory) and starts the store.
func NewOn(t testing.TB, kind, url string) *Fleet {
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
	f := &Fleet{T: t, URL: url, NC: nc, JS: js}
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
		f.Redis, f.RedisPrefix = rdb, fmt.Sprintf("t%d", prefixSeq.Add(1))
		f.Store = redisstore.New(rdb, redisstore.Options{Prefix: f.RedisPrefix})
	case "kv":
		st, err := kvstore.New(ctx, js, kvstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f.Store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	f.Client = client.New(js, f.Store)
	return f
}

func (f *Fleet) logger() *zerolog.Logger {
	l := zerolog.New(zerolog.NewTestWriter(f.T)).Level(zerolog.WarnLevel)
	return &l
}

// StartWorker runs a worker until the test ends or stop is called.
func (f *Fleet) StartWorker(reg *steps.Registry, mod func(*worker.Config)) (w *worker.Worker, stop func()) {
	f.T.Helper()
	cfg := worker.Config{JetStream: f.JS, Store: f.Store, Registry: reg, Concurrency: 16, AckWait: 2 * time.Second, DrainTimeout: 3 * time.Second, Logger: f.logger()}
	if mod != nil {
		mod(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	stop = f.run(w.Run)
	testenv.Eventually(f.T, 10*time.Second, "workflows registered", func() bool {
		infos, err := f.Store.Workflows(context.Background())
		return err == nil && len(infos) >= len(reg.Names())
	})
	return w, stop
}

// StartScheduler runs a scheduler until the test ends.
func (f *Fleet) StartScheduler(mod func(*scheduler.Config)) *scheduler.Scheduler {
	f.T.Helper()
	cfg := scheduler.Config{Client: f.Client, Interval: 100 * time.Millisecond, Lease: 5 * time.Second, Logger: f.logger()}
	if mod != nil {
		mod(&cfg)
	}
	s, err := scheduler.New(cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	_ = f.run(s.Run)
	return s
}

// run runs fn until the test ends or the returned stop is called.
func (f *Fleet) run(fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			f.T.Errorf("Run: %v", err)
		}
	}
	f.T.Cleanup(stop)
	return stop
}

// Start starts a run and fails the test on error.
func (f *Fleet) Start(workflow, id, input string) {
	f.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := f.Client.Start(ctx, client.StartRequest{Workflow: workflow, RunID: id, Input: []byte(input)}); err != nil {
		f.T.Fatalf("start %s: %v", id, err)
	}
}

// WaitStatus polls until run id has the status.
func (f *Fleet) WaitStatus(id string, want checkpoint.Status, timeout time.Duration) checkpoint.Run {
	f.T.Helper()
	var run checkpoint.Run
	testenv.Eventually(f.T, timeout, fmt.Sprintf("%s %s", id, want), func() bool {
		r, err := f.Store.GetRun(context.Background(), id)
		run = r
		return err == nil && r.Status == want
	})
	return run
}

// Checkpoints returns all checkpoints of run id.
func (f *Fleet) Checkpoints(id string) []checkpoint.Checkpoint {
	f.T.Helper()
	cps, err := f.Store.Checkpoints(context.Background(), id)
	if err != nil {
		f.T.Fatal(err)
	}
	return cps
}

// Get returns run id as stored.
func (f *Fleet) Get(id string) checkpoint.Run {
	f.T.Helper()
	run, err := f.Store.GetRun(context.Background(), id)
	if err != nil {
		f.T.Fatal(err)
	}
	return run
}

// WaitDrained waits until the step consumer of workflow has nothing
// pending or unacked: every published step message was handled.
func (f *Fleet) WaitDrained(workflow string, timeout time.Duration) {
	f.T.Helper()
	testenv.Eventually(f.T, timeout, workflow+" step consumer drained", func() bool {
		c, err := f.JS.Consumer(context.Background(), queue.StepStream, queue.ConsumerName(workflow))
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}
