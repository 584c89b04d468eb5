package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
)

// Fault kinds.
const (
	faultKillWorker   = "worker SIGKILL"
	faultRestartNATS  = "nats-server SIGKILL+restart"
	faultRestartRedis = "redis-server SIGKILL+restart"
	faultStopWorker   = "worker SIGSTOP+SIGCONT"
	faultPauseRedis   = "redis-server SIGSTOP+SIGCONT"
)

// zombie is a worker that was frozen past its ack wait and let go on.
type zombie struct {
	member string
	pid    int
	log    string
	offset int64 // size of its log when frozen: later lines are the zombie's
	frozen time.Time
	thawed time.Time
	run    string // the run whose payment answer it was waiting for
}

// injector injects the faults of one chaos run.
type injector struct {
	e   *env
	cfg config

	rngMu sync.Mutex
	rng   *rand.Rand

	// down is set while NATS or Redis is down: workers are not killed
	// then, so that they live through the outage and their transient-error
	// paths (retries, redelivery after an ack wait) run.
	down atomic.Bool

	mu      sync.Mutex
	counts  map[string]int
	zombies []zombie
	errs    []error
}

func newInjector(e *env, cfg config, rng *rand.Rand) *injector {
	return &injector{e: e, cfg: cfg, rng: rng, counts: map[string]int{}}
}

func (in *injector) intn(n int) int {
	in.rngMu.Lock()
	defer in.rngMu.Unlock()
	return in.rng.IntN(n)
}

func (in *injector) count(kind string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.counts[kind]
}

func (in *injector) record(kind string) {
	in.mu.Lock()
	in.counts[kind]++
	in.mu.Unlock()
}

// logf notes a fault in the test log.
func (in *injector) logf(format string, a ...any) {
	in.e.t.Logf(format, a...)
}

func (in *injector) fail(err error) {
	in.mu.Lock()
	in.errs = append(in.errs, err)
	in.mu.Unlock()
}

// run injects faults until windowEnd has passed and every minimum count is
// reached (or ctx ends).
func (in *injector) run(ctx context.Context, start, windowEnd time.Time) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); in.killWorkers(ctx, windowEnd) }()
	go func() { defer wg.Done(); in.scheduled(ctx, start, windowEnd) }()
	wg.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// killWorkers SIGKILLs a random running worker every few hundred ms.
func (in *injector) killWorkers(ctx context.Context, windowEnd time.Time) {
	for {
		every := in.cfg.killEvery
		d := every/2 + time.Duration(in.intn(int(every)))
		if !sleepCtx(ctx, d) {
			return
		}
		if time.Now().After(windowEnd) && in.count(faultKillWorker) >= in.cfg.workerKills {
			return
		}
		if in.down.Load() {
			continue
		}
		// A worker that has been up a moment holds steps: killing one
		// still starting up would test less.
		var cands []*proc.Proc
		for _, m := range in.e.workers {
			if m.Uptime() > 300*time.Millisecond {
				cands = append(cands, m)
			}
		}
		if len(cands) == 0 {
			continue
		}
		// Kill refuses a frozen worker: the zombie must live to wake up.
		if cands[in.intn(len(cands))].Kill() == nil {
			in.record(faultKillWorker)
		}
	}
}

// scheduled spreads the NATS restarts, Redis restarts and pauses and the
// worker stops evenly over the window from start, interleaved.
func (in *injector) scheduled(ctx context.Context, start, windowEnd time.Time) {
	var kinds []string
	for i := 0; i < max(in.cfg.stops, in.cfg.natsRestarts, in.cfg.redisRestarts, in.cfg.redisPauses); i++ {
		if i < in.cfg.stops {
			kinds = append(kinds, faultStopWorker)
		}
		if i < in.cfg.natsRestarts {
			kinds = append(kinds, faultRestartNATS)
		}
		if i < in.cfg.redisRestarts {
			kinds = append(kinds, faultRestartRedis)
		}
		if i < in.cfg.redisPauses {
			kinds = append(kinds, faultPauseRedis)
		}
	}
	// Each fault takes its time (an outage, a freeze): spread what is
	// left of the window evenly between them.
	outage := func(i int) time.Duration { return in.cfg.outages[i%len(in.cfg.outages)] }
	var busy time.Duration
	restarts := 0
	for _, kind := range kinds {
		switch kind {
		case faultStopWorker:
			busy += in.cfg.stopFor
		case faultPauseRedis:
			busy += in.cfg.redisPauseFor
		default:
			busy += outage(restarts / 2)
			restarts++
		}
	}
	gap := max(windowEnd.Sub(start)-busy, 0) / time.Duration(len(kinds)+1)
	if d := time.Until(start); d > 0 {
		sleepCtx(ctx, d)
	}
	restarts = 0
	for _, kind := range kinds {
		if !sleepCtx(ctx, gap) {
			return
		}
		switch kind {
		case faultRestartNATS:
			d := outage(restarts / 2)
			restarts++
			in.logf("%s: nats-server down for %s", time.Now().Format("15:04:05.000"), d)
			in.down.Store(true)
			err := in.e.nats.Restart(d)
			in.down.Store(false)
			if err != nil {
				in.fail(fmt.Errorf("restart nats-server: %w", err))
				return
			}
			in.record(kind)
		case faultRestartRedis:
			d := outage(restarts / 2)
			restarts++
			in.logf("%s: redis-server down for %s", time.Now().Format("15:04:05.000"), d)
			in.down.Store(true)
			err := in.e.redis.Restart(d)
			in.down.Store(false)
			if err != nil {
				in.fail(fmt.Errorf("restart redis-server: %w", err))
				return
			}
			in.record(kind)
		case faultPauseRedis:
			in.logf("%s: redis-server frozen for %s", time.Now().Format("15:04:05.000"), in.cfg.redisPauseFor)
			in.down.Store(true)
			err := in.e.redis.Pause(in.cfg.redisPauseFor)
			in.down.Store(false)
			if err != nil {
				in.fail(fmt.Errorf("pause redis-server: %w", err))
				return
			}
			in.record(kind)
		case faultStopWorker:
			if in.stopWorker(ctx) {
				in.record(kind)
			}
		}
	}
}

// stopWorker freezes a worker past its ack wait, so another worker takes
// its steps over, then lets it go on: a zombie that must not advance a
// run another worker already advanced. It waits for a payment to be made
// and freezes the worker that made it before the answer reaches it: the
// zombie wakes up holding a payment result for a step that another worker
// has meanwhile paid (replayed) and committed.
func (in *injector) stopWorker(ctx context.Context) bool {
	got := make(chan zombie, 1)
	var fired atomic.Bool
	hook := answerHook(func(remote string, status int, body []byte) {
		if status/100 != 2 || fired.Load() {
			return
		}
		byPid := map[int]*proc.Proc{}
		var pids []int
		for _, m := range in.e.workers {
			if p := m.Pid(); p != 0 {
				byPid[p] = m
				pids = append(pids, p)
			}
		}
		m := byPid[testenv.PeerPID(remote, pids)]
		if m == nil || !fired.CompareAndSwap(false, true) {
			return
		}
		pid, err := m.Freeze()
		if err != nil {
			fired.Store(false)
			return
		}
		var p payments.Payment
		_ = json.Unmarshal(body, &p)
		got <- frozenAt(m, pid, p.RunID)
	})
	in.e.payHook.Store(&hook)
	defer in.e.payHook.Store(nil)
	var z zombie
	select {
	case z = <-got:
	case <-time.After(15 * time.Second):
		if fired.CompareAndSwap(false, true) {
			// No payment in 15s: freeze any worker that has been up a while.
			for _, m := range in.e.workers {
				if m.Uptime() > time.Second {
					if pid, err := m.Freeze(); err == nil {
						z = frozenAt(m, pid, "")
						break
					}
				}
			}
			if z.pid == 0 {
				in.fail(fmt.Errorf("no worker could be stopped"))
				return false
			}
		} else {
			z = <-got
		}
	case <-ctx.Done():
		if !fired.CompareAndSwap(false, true) {
			z = <-got
			break
		}
		return false
	}
	in.logf("%s: %s (pid %d) stopped for %s, payment of %q in flight", z.frozen.Format("15:04:05.000"), z.member, z.pid, in.cfg.stopFor, z.run)
	sleepCtx(context.WithoutCancel(ctx), in.cfg.stopFor)
	for _, m := range in.e.workers {
		if m.Name() == z.member {
			m.Thaw(z.pid)
		}
	}
	z.thawed = time.Now()
	in.mu.Lock()
	in.zombies = append(in.zombies, z)
	in.mu.Unlock()
	return true
}

// frozenAt is the zombie m frozen as pid becomes: the lines its log gets
// from now on are the zombie's.
func frozenAt(m *proc.Proc, pid int, run string) zombie {
	log := m.Log()
	var size int64
	if fi, err := os.Stat(log); err == nil {
		size = fi.Size()
	}
	return zombie{member: m.Name(), pid: pid, log: log, offset: size, frozen: time.Now(), run: run}
}
