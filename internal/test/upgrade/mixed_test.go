package upgrade

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/fleet"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/durable-run/durable/pkg/client"
)

// The workers of TestMixedFleet: one process of each binary.
const (
	roleOld = "old" // built from fixtureRelease
	roleNew = "new" // built from this checkout
)

// A worker of the previous release and one of this release take steps
// from the same streams and store (a rolling upgrade caught half-way),
// on both stores: runs of many steps with payments, approvals, signals,
// children, sleeps (woken by a scheduler of this release) and redrives
// all complete, each payment is taken once, and each worker takes steps.
// Each worker is SIGKILLed once as it begins a step; the other takes that
// step over and, alone, finishes the approvals, signals, children and
// redrives decided meanwhile (on redis the old worker dies first, on kv
// the new one). Decisions, signals and redrives come through this
// release's pkg/client, so the old worker reads run records this release
// wrote, redrive_step included.
func TestMixedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the previous release's worker and runs worker processes")
	}
	old, cur := buildMixedWorkers(t)
	for i, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			begin := time.Now()
			m := startMixedFleet(t, kind, map[string]string{roleOld: old, roleNew: cur})
			first, second := roleOld, roleNew
			if i%2 == 1 {
				first, second = second, first
			}
			for _, id := range runIDs("flaky", 1, 4) {
				m.refuse(id, true)
			}
			m.start("mx-pipeline", runIDs("pipe", 1, 6)...)
			m.start("up-approval", runIDs("appr", 1, 6)...)
			m.start("up-signal", runIDs("sig", 1, 6)...)
			m.start("mx-family", runIDs("fam", 1, 4)...)
			m.start("up-sleep", runIDs("nap", 1, 6)...)
			m.start("mx-flaky", runIDs("flaky", 1, 4)...)
			m.alone(first, 1)
			m.start("mx-pipeline", runIDs("pipe", 7, 12)...)
			m.alone(second, 2)
			for _, id := range m.runs {
				m.f.WaitStatus(id, checkpoint.StatusCompleted, 60*time.Second)
			}
			for _, wf := range mixedWorkflowNames {
				m.f.WaitDrained(wf, 20*time.Second)
			}
			m.check()
			t.Logf("%s: %d runs in %s", kind, len(m.runs), time.Since(begin).Round(100*time.Millisecond))
		})
	}
}

var mixedWorkflowNames = []string{"mx-pipeline", "up-approval", "up-signal", "mx-family", "up-kid", "up-sleep", "mx-flaky"}

// mixedFleet is a nats-server, a store, a scheduler of this release and
// one worker process of each release.
type mixedFleet struct {
	t       *testing.T
	f       *testfleet.Fleet
	dir     string // the workers' MIXED_DIR
	workers map[string]*fleet.Service
	// starts are the workers' processes by pid: role and whether it was
	// SIGKILLed.
	starts map[int]*workerStart
	runs   []string // every run started, children included
	// redrivenBy is the worker alone when each mx-flaky run was
	// redriven, by run.
	redrivenBy map[string]string
}

type workerStart struct {
	role   string
	gen    int
	killed bool
}

// runIDs are prefix-from ... prefix-to.
func runIDs(prefix string, from, to int) []string {
	var ids []string
	for i := from; i <= to; i++ {
		ids = append(ids, fmt.Sprintf("%s-%02d", prefix, i))
	}
	return ids
}

// startMixedFleet starts nats-server (and redis-server) as processes, the
// test's client and store on them as the workers configure theirs, a
// scheduler of this release, and the workers of bins (role -> binary),
// and waits until they are ready.
func startMixedFleet(t *testing.T, kind string, bins map[string]string) *mixedFleet {
	t.Helper()
	n := testenv.StartNATSServer(t)
	nc, js := n.Connect(t)
	f := &testfleet.Fleet{T: t, URL: n.URL, NC: nc, JS: js}
	args := []string{"--nats", n.URL, "--ack-wait", "2s", "--drain-timeout", "1s"}
	switch kind {
	case "redis":
		r := testenv.StartRedisServer(t)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		f.Redis, f.RedisPrefix = rdb, "durable" // the workers' default
		f.Store = redisstore.New(rdb, redisstore.Options{Prefix: f.RedisPrefix})
		args = append(args, "--redis", "redis://"+r.Addr)
	case "kv":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := kvstore.New(ctx, js, kvstore.Options{}) // the workers' default bucket
		if err != nil {
			t.Fatal(err)
		}
		f.Store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	f.Client = client.New(js, f.Store)
	m := &mixedFleet{t: t, f: f, dir: t.TempDir(), workers: map[string]*fleet.Service{}, starts: map[int]*workerStart{}, redrivenBy: map[string]string{}}
	// The sleepers, started at once, wake while the fleet works.
	env := []string{"MIXED_DIR=" + m.dir, "MIXED_WAKE=" + time.Now().Add(6*time.Second).Format(time.RFC3339Nano),
		"DURABLE_LOG_LEVEL=info", "DURABLE_NATS_URL=", "DURABLE_REDIS_URL=", "DURABLE_KV_BUCKET=", "DURABLE_REPLICAS="}
	for _, role := range []string{roleOld, roleNew} {
		port, err := proc.FreePort(0)
		if err != nil {
			t.Fatal(err)
		}
		s := &fleet.Service{Metrics: fmt.Sprintf("127.0.0.1:%d", port)}
		s.Proc = proc.New(proc.Config{Name: "worker-" + role, Path: bins[role], Args: slices.Concat(args, []string{"--metrics", s.Metrics}), Env: env, Dir: m.dir})
		t.Cleanup(func() { _ = s.Stop(5 * time.Second) })
		m.workers[role] = s
		m.launch(role)
	}
	testenv.WaitWorkflows(t, f.Store, 30*time.Second, mixedWorkflowNames...)
	f.StartScheduler(nil)
	return m
}

// launch starts role's worker (again), waits until it is ready and notes
// its pid.
func (m *mixedFleet) launch(role string) {
	m.t.Helper()
	s := m.workers[role]
	if err := s.Start(); err != nil {
		m.t.Fatal(err)
	}
	if err := s.WaitReady(30 * time.Second); err != nil {
		m.t.Fatal(err)
	}
	m.starts[s.Pid()] = &workerStart{role: role, gen: len(s.Logs())}
}

// start starts runs of workflow.
func (m *mixedFleet) start(workflow string, ids ...string) {
	m.t.Helper()
	for _, id := range ids {
		m.f.Start(workflow, id, `{"amount":100}`)
		m.runs = append(m.runs, id)
		if workflow == "mx-family" {
			m.runs = append(m.runs, id+"-kid")
		}
	}
}

// refuse makes mx-flaky's step of run fail (on), or pass.
func (m *mixedFleet) refuse(run string, on bool) {
	m.t.Helper()
	path := filepath.Join(m.dir, "refuse-"+run)
	var err error
	if on {
		err = os.WriteFile(path, nil, 0o644)
	} else {
		err = os.Remove(path)
	}
	if err != nil {
		m.t.Fatal(err)
	}
}
