package chaos

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/demo/claims"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

// adjuster is the identity the suite approves as, through the API.
const adjuster = "chaos-adjuster"

// env is the deployment under test.
type env struct {
	t      testing.TB
	cfg    config
	dir    string
	nats   *testenv.NATSServer
	redis  *testenv.RedisServer
	nc     *nats.Conn
	js     jetstream.JetStream
	store  checkpoint.Store
	client *client.Client
	payURL string
	// payHook, when set, sees each payment made, before its answer goes
	// back to the worker that asked.
	payHook atomic.Pointer[answerHook]

	bin         string
	procEnv     []string
	members     []*proc.Proc
	workers     []*proc.Proc
	schedulers  []*proc.Proc
	approver    *proc.Proc
	approverURL string
	token       string
}

func newEnv(t *testing.T, cfg config) *env {
	t.Helper()
	e := &env{t: t, cfg: cfg, dir: t.TempDir()}
	keep := os.Getenv("DURABLE_CHAOS_KEEP") != ""
	if keep {
		dir, err := os.MkdirTemp("", "durable-chaos-")
		if err != nil {
			t.Fatal(err)
		}
		e.dir = dir
		t.Logf("logs and data kept in %s", dir)
	}
	bin := testenv.DurableBin(t)
	e.bin = bin
	// The servers keep their data and logs in the suite's dir: kept with
	// it, dumped with the services' logs.
	e.nats = testenv.StartNATSServer(t, testenv.NATSDir(filepath.Join(e.dir, "nats")))
	e.redis = testenv.StartRedisServer(t, testenv.RedisDir(filepath.Join(e.dir, "redis")), testenv.RedisAOF("always"))
	t.Logf("nats-server %s (pid %d, store %s), redis-server %s (pid %d, dir %s)", e.nats.URL, e.nats.Pid(), e.nats.Dir, e.redis.URL, e.redis.Pid(), e.redis.Dir)

	// The suite's own connections ride out the restarts like the fleet's.
	nc, err := nats.Connect(e.nats.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	e.nc = nc
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	opt, err := redis.ParseURL(e.redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	e.store = redisstore.New(rdb, redisstore.Options{})
	e.client = client.New(e.js, e.store)

	// The payments API and the claims system, in this process: they are
	// the outside world, not part of the fleet, and are never faulted.
	pay, err := payments.Open(filepath.Join(e.dir, "payments.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := claims.Open(filepath.Join(e.dir, "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	// Real providers take their time: a payment in flight is what a kill
	// or a freeze must catch (after the effect, before the checkpoint).
	mux.Handle("/demo/payments/", withLatency(http.MethodPost, 50*time.Millisecond, 250*time.Millisecond, &e.payHook, http.StripPrefix("/demo/payments", pay.Handler())))
	mux.Handle("/demo/claims/", withLatency("", 5*time.Millisecond, 30*time.Millisecond, nil, http.StripPrefix("/demo/claims", cl.Handler())))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	base := "http://" + lis.Addr().String()
	e.payURL = base + "/demo/payments"

	// A token for the approver, made by the operator command.
	tokenFile := filepath.Join(e.dir, "tokens.json")
	var out, errb bytes.Buffer
	create := exec.Command(bin, "token", "create", "--file", tokenFile, "--id", adjuster, "--groups", "adjusters,supervisors")
	create.Stdout, create.Stderr = &out, &errb
	if err := create.Run(); err != nil {
		t.Fatalf("durable token create: %v\n%s", err, errb.String())
	}
	e.token = strings.TrimSpace(out.String())

	conn := []string{"--nats", e.nats.URL, "--redis", e.redis.URL}
	e.procEnv = []string{"DURABLE_LOG_LEVEL=info", "DURABLE_PAYMENTS_URL=" + e.payURL, "DURABLE_CLAIMS_URL=" + base + "/demo/claims"}
	t.Cleanup(func() {
		e.stopMembers()
		_ = srv.Close()
		_ = pay.Close()
	})
	for i := 1; i <= cfg.workers; i++ {
		args := append([]string{"worker"}, conn...)
		args = append(args, "--ack-wait", cfg.ackWait.String(), "--concurrency", fmt.Sprint(cfg.concurrency), "--drain-timeout", "1s")
		e.workers = append(e.workers, e.addMember(fmt.Sprintf("worker-%d", i), args))
	}
	for i := 1; i <= cfg.schedulers; i++ {
		args := append([]string{"scheduler"}, conn...)
		args = append(args, "--interval", "500ms", "--lease", "5s", "--stuck-after", cfg.stuckAfter.String(), "--step-timeout", "5s")
		e.schedulers = append(e.schedulers, e.addMember(fmt.Sprintf("scheduler-%d", i), args))
	}
	addr := freeAddr(t)
	e.approverURL = "http://" + addr
	args := append([]string{"approver"}, conn...)
	args = append(args, "--http", addr, "--tokens", tokenFile)
	e.approver = e.addMember("approver", args)

	e.waitReady()
	return e
}

// answerHook sees a request's answer before it is sent: the caller's
// address, the status and the body.
type answerHook func(remote string, status int, body []byte)

// withLatency delays the answers to method ("" for all) by a random time
// in [lo, hi) after h has handled the request, like a provider whose
// answer is on its way when the caller dies: the effect is done, the
// caller does not know it yet. A hook set in *hook runs at that moment.
func withLatency(method string, lo, hi time.Duration, hook *atomic.Pointer[answerHook], h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if method != "" && r.Method != method {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if hook != nil {
			if f := hook.Load(); f != nil {
				(*f)(r.RemoteAddr, rec.Code, rec.Body.Bytes())
			}
		}
		time.Sleep(lo + time.Duration(rand.Int64N(int64(hi-lo))))
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// waitReady waits for the workers' workflows and the approver's API.
func (e *env) waitReady() {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		infos, err := e.store.Workflows(context.Background())
		names := map[string]bool{}
		for _, in := range infos {
			names[in.Name] = true
		}
		ready := err == nil && names["claim"] && names["agent-loop"]
		if ready {
			resp, err := http.Get(e.approverURL + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			e.dumpLogs(4000)
			e.t.Fatal("the fleet did not come up within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logs are every process's logs: the services' and the servers'.
func (e *env) logs() []string {
	paths, _ := filepath.Glob(filepath.Join(e.dir, "*.log"))
	return append(append(paths, e.nats.Logs()...), e.redis.Logs()...)
}

// dumpLogs logs the tail of every process log.
func (e *env) dumpLogs(n int) {
	for _, p := range e.logs() {
		b, _ := os.ReadFile(p)
		if len(b) > n {
			b = b[len(b)-n:]
		}
		e.t.Logf("--- %s (tail)\n%s", filepath.Base(p), b)
	}
}

// allExits are the ends of the services that the suite did not cause.
func (e *env) allExits() []proc.Exit {
	var out []proc.Exit
	for _, m := range e.members {
		out = append(out, m.Exits()...)
	}
	return out
}
