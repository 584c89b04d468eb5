package flow_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// BenchmarkTake: Take of a limit that does not bind (every call takes a
// token: a read and a compare-and-set on one KV key), by 1 and 8 takers
// on connections of their own to an embedded server; a refused Take (a
// read); and a Limiter's Take of a name with no limit (no round trip).
// takes/s is the store's throughput for one limit; contended/op is the
// share of calls that gave up after losing too many compare-and-sets.
func BenchmarkTake(b *testing.B) {
	srv := testenv.StartNATS(b)
	admin, _ := newStore(b, srv, flow.StoreOptions{})
	set(b, admin, "open", flow.Rate{N: 1_000_000, Per: time.Second, Burst: 1_000_000})
	set(b, admin, "shut", flow.Rate{N: 1, Per: 24 * time.Hour, Burst: 1})
	if _, err := admin.Take(b.Context(), "shut", time.Now()); err != nil {
		b.Fatal(err)
	}
	for _, takers := range []int{1, 8} {
		b.Run(fmt.Sprintf("taken/takers=%d", takers), func(b *testing.B) {
			benchTakers(b, srv, takers, "open")
		})
	}
	b.Run("refused/takers=1", func(b *testing.B) { benchTakers(b, srv, 1, "shut") })
	b.Run("limiter-unlimited", func(b *testing.B) {
		lim := flow.NewLimiter(admin, flow.LimiterOptions{})
		for b.Loop() {
			if wait, err := lim.Take(b.Context(), "free", time.Now()); wait != 0 || err != nil {
				b.Fatal(wait, err)
			}
		}
	})
}

func benchTakers(b *testing.B, srv *testenv.NATS, takers int, name string) {
	stores := make([]*flow.Store, takers)
	for i := range stores {
		stores[i], _ = newStore(b, srv, flow.StoreOptions{})
	}
	var next, contended atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for _, st := range stores {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				wait, err := st.Take(b.Context(), name, time.Now())
				if err != nil {
					b.Error(err)
					return
				}
				if wait > 0 && name == "open" {
					contended.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "takes/s")
	b.ReportMetric(float64(contended.Load())/float64(b.N), "contended/op")
}

// BenchmarkPoolSlot: a slot taken and released under a concurrency limit
// that does not bind (1,000), the worker's cost per step that uses a
// limited resource: no round trip, a lease written a few times a lease.
func BenchmarkPoolSlot(b *testing.B) {
	srv := testenv.StartNATS(b)
	p, st := pool(b, srv, 0)
	if _, err := st.SetConcurrency(b.Context(), "model", 1000, "bench"); err != nil {
		b.Fatal(err)
	}
	eventually(b, "the pool sees the limit", func() bool { return p.Limited("model") })
	acquire(b, p, "model", "").Release() // the first lease
	b.ReportAllocs()
	for b.Loop() {
		s := p.TryAcquire("model")
		if s == nil {
			s = acquire(b, p, "model", "")
		}
		s.Release()
	}
}
