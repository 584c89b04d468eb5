package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/service"
)

// Options shape a fleet. Zero values are the defaults.
type Options struct {
	// Single runs one nats-server and one plain redis-server instead of
	// the clusters (a baseline for the scale-out figures).
	Single bool
	// NATSNodes of the JetStream cluster. Default 3.
	NATSNodes int
	// RedisPrimaries and RedisReplicas (per primary) of the Redis Cluster.
	// Default 3 and 1.
	RedisPrimaries, RedisReplicas int
	// Replicas is --replicas of the services. Default: NATSNodes (1 with
	// Single).
	Replicas int
	// Workers and Schedulers started by Start (more with AddWorker).
	Workers, Schedulers int
	// Concurrency is the workers' --concurrency. Default 16.
	Concurrency int
	// AckWait is the workers' --ack-wait. Default 3s.
	AckWait time.Duration
	// StuckAfter is the schedulers' --stuck-after. Default 15s.
	StuckAfter time.Duration
	// SlowPayments makes the payments API answer 50-250ms after paying,
	// like a real provider (a worker killed meanwhile has paid without
	// knowing it). Off: it answers at once.
	SlowPayments bool
}

// Fleet is a running deployment on loopback and the test's own
// connections to it.
type Fleet struct {
	T     testing.TB
	Dir   string
	Opts  Options
	NATS  *testenv.NATSCluster
	Redis *RedisCluster        // nil with Single
	Plain *testenv.RedisServer // with Single

	NATSURL, RedisURL string
	PaymentsURL       string

	Workers    []*Service
	Schedulers []*Service

	NC     *nats.Conn
	JS     jetstream.JetStream
	RDB    redis.UniversalClient
	Store  checkpoint.Store
	Client *client.Client

	bin string
	env []string
	// unanswered holds the remote addresses of payments made whose answer
	// is still on its way (answerLate).
	unanswered sync.Map
}

// Start starts the servers, the payments API, the services, and the
// test's connections, and waits until the workers have registered the
// reference workflows.
func Start(tb testing.TB, dir string, o Options) *Fleet {
	tb.Helper()
	if o.NATSNodes == 0 {
		o.NATSNodes = 3
	}
	if o.RedisPrimaries == 0 {
		o.RedisPrimaries = 3
	}
	if o.RedisReplicas == 0 {
		o.RedisReplicas = 1
	}
	if o.Single {
		o.NATSNodes = 1
	}
	if o.Replicas == 0 {
		o.Replicas = o.NATSNodes
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.AckWait == 0 {
		o.AckWait = 3 * time.Second
	}
	if o.StuckAfter == 0 {
		o.StuckAfter = 15 * time.Second
	}
	f := &Fleet{T: tb, Dir: dir, Opts: o, bin: testenv.DurableBin(tb)}
	f.NATS = StartNATSCluster(tb, dir, o.NATSNodes)
	f.NATSURL = f.NATS.URL()
	if o.Single {
		f.Plain = testenv.StartRedisServer(tb, testenv.RedisAOF("everysec"), testenv.RedisDir(filepath.Join(dir, "redis")))
		f.RedisURL = "redis://" + f.Plain.Addr
	} else {
		f.Redis = StartRedisCluster(tb, dir, RedisClusterOptions{Primaries: o.RedisPrimaries, Replicas: o.RedisReplicas})
		f.RedisURL = f.Redis.URL()
	}
	// The test reaches the store with the client the services build.
	rdb, err := service.RedisClient(f.RedisURL)
	if err != nil {
		tb.Fatal(err)
	}
	f.RDB = rdb
	tb.Cleanup(func() { _ = f.RDB.Close() })
	f.PaymentsURL = servePayments(tb, dir, o.SlowPayments, &f.unanswered)

	// The test's connections ride out the faults like the fleet's.
	nc, err := nats.Connect(f.NATSURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	f.NC = nc
	if f.JS, err = jetstream.New(nc); err != nil {
		tb.Fatal(err)
	}
	f.Store = redisstore.New(f.RDB, redisstore.Options{})
	f.Client = client.New(f.JS, f.Store)

	f.env = []string{"DURABLE_LOG_LEVEL=info", "DURABLE_PAYMENTS_URL=" + f.PaymentsURL,
		// The refund agent replays its recorded transcript, never a
		// provider the machine happens to have a key for.
		"ANTHROPIC_API_KEY=", "OPENAI_API_KEY=", "DURABLE_CRASH=",
		// Connection settings come from the flags alone.
		"DURABLE_NATS_URL=", "DURABLE_REDIS_URL=", "DURABLE_REPLICAS="}
	for range o.Workers {
		f.AddWorker()
	}
	for range o.Schedulers {
		f.AddScheduler()
	}
	for _, s := range append(append([]*Service(nil), f.Workers...), f.Schedulers...) {
		if err := s.WaitReady(60 * time.Second); err != nil {
			tb.Fatal(err)
		}
	}
	if len(f.Workers) > 0 {
		f.WaitWorkflows(60*time.Second, "claim", "refund-agent")
	}
	return f
}

func (f *Fleet) conn() []string {
	return []string{"--nats", f.NATSURL, "--redis", f.RedisURL, "--replicas", strconv.Itoa(f.Opts.Replicas)}
}

// AddWorker starts one more worker process (not waiting for it).
func (f *Fleet) AddWorker() *Service {
	args := append([]string{"worker"}, f.conn()...)
	args = append(args, "--ack-wait", f.Opts.AckWait.String(), "--concurrency", strconv.Itoa(f.Opts.Concurrency), "--drain-timeout", "2s")
	s := f.service(fmt.Sprintf("worker-%d", len(f.Workers)+1), args)
	f.Workers = append(f.Workers, s)
	return s
}

// AddScheduler starts one more scheduler process (not waiting for it).
func (f *Fleet) AddScheduler() *Service {
	args := append([]string{"scheduler"}, f.conn()...)
	args = append(args, "--interval", "500ms", "--lease", "5s", "--stuck-after", f.Opts.StuckAfter.String(), "--step-timeout", "5s", "--stuck-min", "10s")
	s := f.service(fmt.Sprintf("scheduler-%d", len(f.Schedulers)+1), args)
	f.Schedulers = append(f.Schedulers, s)
	return s
}

// service starts a process of the reference binary, its logs in the
// fleet's dir; it is stopped (SIGTERM, SIGKILL after 10s) at cleanup.
func (f *Fleet) service(name string, args []string) *Service {
	f.T.Helper()
	port, err := proc.FreePort(0)
	if err != nil {
		f.T.Fatal(err)
	}
	s := &Service{Metrics: fmt.Sprintf("127.0.0.1:%d", port)}
	s.Proc = proc.New(proc.Config{Name: name, Path: f.bin, Args: append(args, "--metrics", s.Metrics), Env: f.env, Dir: f.Dir})
	f.T.Cleanup(func() { _ = s.Stop(10 * time.Second) })
	if err := s.Start(); err != nil {
		f.T.Fatal(err)
	}
	return s
}

// WaitWorkflows waits until the store lists the workflows.
func (f *Fleet) WaitWorkflows(timeout time.Duration, names ...string) {
	f.T.Helper()
	testenv.Eventually(f.T, timeout, "workflows "+strings.Join(names, ", ")+" registered", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		infos, err := f.Store.Workflows(ctx)
		if err != nil {
			return false
		}
		have := map[string]bool{}
		for _, in := range infos {
			have[in.Name] = true
		}
		for _, n := range names {
			if !have[n] {
				return false
			}
		}
		return true
	})
}

// Services are the workers and schedulers.
func (f *Fleet) Services() []*Service {
	return append(append([]*Service(nil), f.Workers...), f.Schedulers...)
}

// Service is a durable worker or scheduler process with its metrics
// address (/readyz).
type Service struct {
	*proc.Proc
	Metrics string
}

// WaitReady waits until /readyz answers 200.
func (s *Service) WaitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl := http.Client{Timeout: time.Second}
	return s.Proc.WaitReady(ctx, func() error {
		resp, err := cl.Get("http://" + s.Metrics + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	})
}

// StartNATSCluster starts the fleet's JetStream cluster: n nats-server
// processes named n1..nN with routes between them, their stores and logs
// under dir (see testenv.StartNATSCluster).
func StartNATSCluster(tb testing.TB, dir string, n int) *testenv.NATSCluster {
	tb.Helper()
	return testenv.StartNATSCluster(tb, n, testenv.NATSDir(dir))
}

// Restart starts a stopped or killed service again and waits until it is
// ready.
func (s *Service) Restart(timeout time.Duration) error {
	if err := s.Start(); err != nil {
		return err
	}
	return s.WaitReady(timeout)
}

// servePayments serves the demo payments API on loopback, its records in
// dir, and returns its URL. It is the outside world: never faulted (with
// slow, slow to answer).
func servePayments(tb testing.TB, dir string, slow bool, unanswered *sync.Map) string {
	tb.Helper()
	pay, err := payments.Open(filepath.Join(dir, "payments.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	var h http.Handler = http.StripPrefix("/demo/payments", pay.Handler())
	if slow {
		h = answerLate(unanswered, h)
	}
	mux.Handle("/demo/payments/", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(func() {
		_ = srv.Close()
		_ = pay.Close()
	})
	return "http://" + lis.Addr().String() + "/demo/payments"
}

// answerLate delays the answer to a payment by 50-250ms after it was
// made, like a real provider: a worker killed meanwhile has paid without
// knowing it, and its step's retry must be answered from the key. The
// callers waiting for their answer are in unanswered meanwhile.
func answerLate(unanswered *sync.Map, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK || rec.Code == http.StatusCreated {
			unanswered.Store(r.RemoteAddr, time.Now())
		}
		time.Sleep(50*time.Millisecond + time.Duration(rand.Int64N(int64(200*time.Millisecond))))
		unanswered.Delete(r.RemoteAddr)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// PaidWorker is a worker that has made a payment whose answer it has not
// received yet (the provider holds the payment, the worker does not know
// it), or nil when none is found.
func (f *Fleet) PaidWorker() *Service {
	pids := map[int]*Service{}
	var list []int
	for _, w := range f.Workers {
		if pid := w.Pid(); pid != 0 {
			pids[pid] = w
			list = append(list, pid)
		}
	}
	var found *Service
	f.unanswered.Range(func(k, _ any) bool {
		if pid := testenv.PeerPID(k.(string), list); pid != 0 {
			found = pids[pid]
			return false
		}
		return true
	})
	return found
}
