package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/queue"
)

// faultEvent is one step of the fault schedule as it happened.
type faultEvent struct {
	at   time.Time
	what string
}

// faults injects the schedule: a NATS node SIGKILLed (the step stream's
// leader) and restarted on its store ~10s later; a Redis primary
// SIGKILLed, its replica promoted, the old primary restarted (it rejoins
// as a replica); a worker SIGKILLed and restarted.
type faults struct {
	f      *Fleet
	mu     sync.Mutex
	events []faultEvent
	errs   []string
	// kills are the instants of the three SIGKILLs, for the pauses.
	kills map[string]time.Time
}

func (x *faults) log(what string, a ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := faultEvent{at: time.Now(), what: fmt.Sprintf(what, a...)}
	x.events = append(x.events, e)
	x.f.T.Logf("fault %s: %s", e.at.Format("15:04:05.000"), e.what)
}

func (x *faults) fail(format string, a ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.errs = append(x.errs, fmt.Sprintf(format, a...))
}

func (x *faults) kill(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.kills == nil {
		x.kills = map[string]time.Time{}
	}
	x.kills[name] = time.Now()
}

// sleepUntil waits until t0+d or ctx ends.
func sleepUntil(ctx context.Context, t0 time.Time, d time.Duration) bool {
	select {
	case <-time.After(time.Until(t0.Add(d))):
		return true
	case <-ctx.Done():
		return false
	}
}

func (x *faults) run(ctx context.Context, t0 time.Time) {
	// The schedule (seconds after the first start): NATS node at 8 (down
	// 10s), Redis primary at 28 (restarted ~13s later), worker at ~45.
	if !sleepUntil(ctx, t0, 8*time.Second) {
		return
	}
	x.natsNode(ctx)
	if !sleepUntil(ctx, t0, 28*time.Second) {
		return
	}
	x.redisPrimary(ctx)
	if !sleepUntil(ctx, t0, 45*time.Second) {
		return
	}
	x.worker()
}

// natsNode kills the node that leads the step stream: the stream and its
// consumers elect new leaders, the meta layer too when it led that.
func (x *faults) natsNode(ctx context.Context) {
	f := x.f
	victim := f.NATS.Nodes[len(f.NATS.Nodes)-1]
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if st, err := f.JS.Stream(cctx, queue.StepStream); err == nil {
		if cl := st.CachedInfo().Cluster; cl != nil {
			for _, n := range f.NATS.Nodes {
				if n.Name == cl.Leader {
					victim = n
				}
			}
		}
	}
	cancel()
	meta, _ := victim.MetaLeader()
	if err := victim.Kill(); err != nil {
		x.fail("kill NATS %s: %v", victim.Name, err)
		return
	}
	x.kill("nats")
	x.log("SIGKILL nats-server %s (leader of %s; meta leader %s)", victim.Name, queue.StepStream, meta)
	time.Sleep(10 * time.Second)
	if err := victim.Start(); err != nil {
		x.fail("restart NATS %s: %v", victim.Name, err)
		return
	}
	x.log("nats-server %s restarted on its store; healthy (caught up)", victim.Name)
	hctx, hcancel := context.WithTimeout(ctx, 60*time.Second)
	defer hcancel()
	if err := f.NATS.WaitHealthy(hctx); err != nil {
		x.fail("NATS cluster after the restart: %v", err)
		return
	}
	x.log("NATS cluster healthy: every node names the same meta leader")
}

// redisPrimary fails over one primary: SIGKILL, its replica promoted by
// the cluster (cluster-node-timeout 2s), the old primary started again.
func (x *faults) redisPrimary(ctx context.Context) {
	f := x.f
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	primaries, err := f.Redis.Primaries(cctx)
	if err != nil || len(primaries) == 0 {
		x.fail("find a Redis primary: %v", err)
		return
	}
	victim := primaries[0]
	replica := f.Redis.ReplicaOf(cctx, victim)
	if replica == nil {
		x.fail("primary %s has no running replica", victim.Name)
		return
	}
	keys, _ := victim.DBSize(cctx)
	if err := victim.Kill(); err != nil {
		x.fail("kill Redis %s: %v", victim.Name, err)
		return
	}
	x.kill("redis")
	killed := time.Now()
	x.log("SIGKILL redis-server %s (primary, %d keys; replica %s)", victim.Name, keys, replica.Name)
	pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
	defer pcancel()
	if err := f.Redis.WaitPrimary(pctx, replica); err != nil {
		x.fail("%v", err)
		return
	}
	x.log("redis-server %s promoted to primary after %s; cluster_state ok", replica.Name, time.Since(killed).Round(10*time.Millisecond))
	time.Sleep(8 * time.Second)
	if err := victim.Start(); err != nil {
		x.fail("restart Redis %s: %v", victim.Name, err)
		return
	}
	if err := f.Redis.WaitHealthy(60*time.Second, len(f.Redis.Nodes)); err != nil {
		x.fail("Redis Cluster after %s rejoined: %v", victim.Name, err)
		return
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	me, err := victim.self(rctx)
	role := "?"
	if err == nil && me.Of != "" {
		if p := f.Redis.Node(me.Of); p != nil {
			role = "a replica of " + p.Name
		}
	} else if err == nil {
		role = "a primary"
	}
	x.log("redis-server %s restarted on its AOF: rejoined as %s; cluster ok, replicas in sync", victim.Name, role)
}

// worker SIGKILLs a worker (in-flight steps redeliver after the ack wait)
// and starts it again.
func (x *faults) worker() {
	f := x.f
	// Best: a worker that has just paid and waits for the answer (after
	// the effect, before the checkpoint: the dangerous crash).
	var w *Service
	for end := time.Now().Add(10 * time.Second); w == nil && time.Now().Before(end); {
		if w = f.PaidWorker(); w == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	how := "while it waited for the answer to a payment it had made"
	if w == nil {
		w, how = f.Workers[len(f.Workers)/2], "(no payment in flight)"
	}
	if err := w.Kill(); err != nil {
		x.fail("kill %s: %v", w.Name(), err)
		return
	}
	x.kill("worker")
	x.log("SIGKILL %s %s", w.Name(), how)
	time.Sleep(2 * time.Second)
	if err := w.Restart(30 * time.Second); err != nil {
		x.fail("restart %s: %v", w.Name(), err)
		return
	}
	x.log("%s restarted", w.Name())
}

func (x *faults) snapshot() ([]faultEvent, []string, map[string]time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := map[string]time.Time{}
	for a, b := range x.kills {
		k[a] = b
	}
	return append([]faultEvent(nil), x.events...), append([]string(nil), x.errs...), k
}
