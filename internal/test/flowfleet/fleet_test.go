package flowfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
)

// The fleet's shape: issue 27's acceptance.
const (
	limit       = 5
	nWorkers    = 3
	concurrency = 8
	// lease is flow.PoolOptions.Lease's default, which the worker uses.
	lease = 15 * time.Second
	// maxWaitingCPU bounds the CPU a worker spends a second while most of
	// its steps wait for a slot: a hot loop of redeliveries, or a poll of
	// the limit by each waiting step, spends a whole core.
	maxWaitingCPU = 0.25
)

// plan is what one fleet test does.
type plan struct {
	runs, turns int
	cpuWindow   time.Duration // 0: no CPU measurement
	kill        bool
}

// TestFlowFleet is issue 27's acceptance of concurrency limits at
// process level, on each store (DURABLE_FLOWFLEET=1, `make flowfleet`;
// 25-45 s). Three worker processes of 8 steps each share a limit of
// 5 on "model"; 200 agent runs take 3 turns each, a turn being one step
// that uses "model" and calls the fake provider in the test process
// (100-200 ms a call). Three turns a run, not one, keep calls queued
// for longer than the lease after the kill (600 calls: 18 s at the
// limit), so that the slots' return is seen with work waiting.
//
//   - The provider never has more than 5 calls in flight.
//   - Every run completes, and each turn reached the provider once; a
//     turn may have reached it again only if every call before the last
//     came from the worker that was killed (it died mid-call or before
//     its commit, and the step was redelivered).
//   - CPU while waiting: once all three workers have called, for 5 s
//     while most of the 600 calls are queued, each worker's user+system
//     time from /proc/<pid>/stat (utime+stime), over the window: CPU
//     seconds a second. It must stay under 0.25 (a worker that polled
//     for its slots would spend a core).
//   - Then the worker with the most calls in flight is SIGKILLed. Its
//     slots come back once its lease ends, within the 15 s lease of the
//     kill (see killAndWatch), and the two live workers have 5 calls in
//     flight again within 3 s more.
func TestFlowFleet(t *testing.T) {
	if os.Getenv("DURABLE_FLOWFLEET") == "" {
		t.Skip("25-45 s: run with DURABLE_FLOWFLEET=1 go test -run TestFlowFleet ./internal/test/flowfleet (make flowfleet)")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // each store has its own servers and processes
			runFleet(t, kind, plan{runs: 200, turns: 3, cpuWindow: 5 * time.Second, kill: true})
		})
	}
}

// TestFlowFleetShort is TestFlowFleet's short form for `go test ./...`:
// 60 runs of one turn, no kill, no CPU window.
func TestFlowFleetShort(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			runFleet(t, kind, plan{runs: 60, turns: 1})
		})
	}
}

func runFleet(t *testing.T, kind string, p plan) {
	began := time.Now()
	d := deploy(t, kind, limits{all: limit}, nWorkers, concurrency, func() time.Duration {
		return 100*time.Millisecond + rand.N(100*time.Millisecond)
	})
	t.Logf("%s: deployed in %s", kind, time.Since(began).Round(100*time.Millisecond))
	ids := make([]string, p.runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("agent-%03d", i)
		d.start(ids[i], fmt.Sprintf("t%d", i%10), p.turns)
	}
	testenv.Eventually(t, 30*time.Second, "calls from every worker", func() bool { return len(d.prov.callers()) == nWorkers })
	if p.cpuWindow > 0 {
		d.measureCPU(p.cpuWindow, p.runs*p.turns)
	}
	dead := 0
	if p.kill {
		dead = d.killAndWatch()
	}
	d.waitCompleted(ids, 2*time.Minute)
	dup := d.checkCalls(ids, p.turns, dead)
	total, peak := d.prov.stats()
	if peak > limit || peak < limit-1 {
		t.Errorf("%s: the provider had at most %d calls in flight; want %d (the limit)", kind, peak, limit)
	}
	d.checkLogs()
	t.Logf("%s: %d runs x %d turns: %d calls (%d turns called more than once, each first by the killed worker), peak %d in flight (limit %d), %s",
		kind, p.runs, p.turns, total, dup, peak, limit, time.Since(began).Round(100*time.Millisecond))
}

// measureCPU measures each worker's CPU over window, while most of the
// calls are queued, and fails the test past maxWaitingCPU.
func (d *deployment) measureCPU(window time.Duration, calls int) {
	d.t.Helper()
	ctx := context.Background()
	before := make([]time.Duration, len(d.workers))
	for i, w := range d.workers {
		c, err := cpuTime(w.Pid())
		if err != nil {
			d.t.Fatal(err)
		}
		before[i] = c
	}
	s, err := d.limits.Concurrency(ctx, "model")
	if err != nil {
		d.t.Fatal(err)
	}
	doneBefore, _ := d.prov.stats()
	<-time.After(window)
	doneAfter, _ := d.prov.stats()
	per := make([]string, len(d.workers))
	for i, w := range d.workers {
		c, err := cpuTime(w.Pid())
		if err != nil {
			d.t.Fatal(err)
		}
		rate := (c - before[i]).Seconds() / window.Seconds()
		per[i] = fmt.Sprintf("%s %.3f", w.Name(), rate)
		if rate > maxWaitingCPU {
			d.t.Errorf("%s: %s spent %.3f CPU-s/s while its steps waited; want < %.2f", d.kind, w.Name(), rate, maxWaitingCPU)
		}
	}
	if s.Wanted == 0 || doneAfter > calls*2/3 {
		d.t.Errorf("%s: the CPU window did not find calls queued (%d wanted; %d of %d calls made by its end)", d.kind, s.Wanted, doneAfter, calls)
	}
	d.t.Logf("%s: CPU over %s with calls queued (%d wanted at its start; calls %d -> %d of %d): %v CPU-s/s",
		d.kind, window, s.Wanted, doneBefore, doneAfter, calls, per)
}

// killAndWatch SIGKILLs the worker with the most calls in flight and
// measures how long its slots take to come back; it returns its pid.
//
// Its lease is found in the limit's record (KV durable_limits, key
// c.model, as `nats kv get` shows it): the lease of the record read just
// before the kill that is never renewed after it (a live worker renews
// at least every 5 s while it holds or wants slots). The slots are back
// when that lease ends (flow.Store.Concurrency no longer counts it);
// the provider says when the two live workers first have 5 calls in
// flight again.
func (d *deployment) killAndWatch() int {
	d.t.Helper()
	pid, inflight := d.prov.busiest()
	i := slices.IndexFunc(d.workers, func(w *proc.Proc) bool { return w.Pid() == pid })
	if i < 0 || inflight == 0 {
		d.t.Fatalf("%s: no worker has a call in flight to kill it in", d.kind)
	}
	before := d.leases()
	d.prov.killing(pid)
	killed := time.Now()
	if err := d.workers[i].Kill(); err != nil {
		d.t.Fatal(err)
	}
	_, dead := d.deadHolder(before, func() bool {
		d.prov.mu.Lock()
		defer d.prov.mu.Unlock()
		return !d.prov.fullAgain.IsZero()
	})
	fullBack, leaseEnd := d.prov.fullAgain.Sub(killed), dead.Until.Sub(killed)
	if leaseEnd > lease || fullBack > lease+3*time.Second {
		d.t.Errorf("%s: slots back %s after the kill (its lease ended after %s); want within the %s lease", d.kind, fullBack, leaseEnd, lease)
	}
	d.t.Logf("%s: killed %s (pid %d, %d calls in flight; its lease held %d of %d holders' slots): its lease ended %s after the kill, %d calls in flight again after %s (lease %s)",
		d.kind, d.workers[i].Name(), pid, inflight, dead.N, len(before), leaseEnd.Round(10*time.Millisecond), limit, fullBack.Round(10*time.Millisecond), lease)
	return pid
}

// deadHolder waits until exactly one holder of before (the leases of
// "model"'s record read just before a kill) is no longer alive and its
// lease has run out, and ready() holds (it is called at every poll); it
// returns that holder and its lease. A holder is alive once its
// lease is renewed, or gone from the record before it ran out (it gave
// its slots back); a lease pruned after it ran out was not renewed.
func (d *deployment) deadHolder(before map[string]holderLease, ready func() bool) (string, holderLease) {
	d.t.Helper()
	alive := map[string]bool{}
	var dead string
	testenv.Eventually(d.t, lease+10*time.Second, "the killed worker's slots back", func() bool {
		ls := d.leases()
		at := time.Now() // after the read: a lease missing while due was given back
		for id, b := range before {
			if l, ok := ls[id]; (ok && !l.Until.Equal(b.Until)) || (!ok && at.Before(b.Until)) {
				alive[id] = true
			}
		}
		var left []string
		for id := range before {
			if !alive[id] {
				left = append(left, id)
			}
		}
		ok := ready()
		if len(left) != 1 || time.Now().Before(before[left[0]].Until) || !ok {
			return false
		}
		dead = left[0]
		return true
	})
	return dead, before[dead]
}

// holderLease is one process's lease in a concurrency limit's record.
type holderLease struct {
	N     int       `json:"n"`
	Want  int       `json:"want"`
	Until time.Time `json:"until"`
}

// leases reads the leases of "model"'s record as stored.
func (d *deployment) leases() map[string]holderLease {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := d.js.KeyValue(ctx, "durable_limits")
	if err != nil {
		d.t.Fatal(err)
	}
	e, err := kv.Get(ctx, "c.model")
	if err != nil {
		d.t.Fatal(err)
	}
	var rec struct {
		Holders map[string]holderLease `json:"holders"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		d.t.Fatal(err)
	}
	return rec.Holders
}

// checkCalls: each turn of each run reached the provider, and more than
// once only when the calls before the last came from the dead worker.
// It returns how many turns were called more than once.
func (d *deployment) checkCalls(ids []string, turns, dead int) (dup int) {
	d.t.Helper()
	d.prov.mu.Lock()
	defer d.prov.mu.Unlock()
	if want := len(ids) * turns; len(d.prov.calls) != want {
		d.t.Errorf("%s: %d turns called; want %d", d.kind, len(d.prov.calls), want)
	}
	for _, id := range ids {
		for turn := 1; turn <= turns; turn++ {
			pids := d.prov.calls[fmt.Sprintf("%s/%d", id, turn)]
			switch {
			case len(pids) == 0:
				d.t.Errorf("%s: %s turn %d never called the provider", d.kind, id, turn)
			case len(pids) > 1:
				dup++
				if dead == 0 || slices.ContainsFunc(pids[:len(pids)-1], func(p int) bool { return p != dead }) {
					d.t.Errorf("%s: %s turn %d called %d times, by %v (killed: %d)", d.kind, id, turn, len(pids), pids, dead)
				}
			}
		}
	}
	return dup
}
