package flowfleet

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// TestFlowFairness is issue 27's acceptance of fairness, with the worker
// processes of TestFlowFleet on each store (DURABLE_FLOWFLEET=1, `make
// flowfleet`; about 20 s, most of it starting 1,010 runs; `go test
// ./...` has pkg/worker's TestConcurrencyLimitIsFairBetweenTenants,
// in-process): with a limit of 5 on "model"
// and calls of 5 ms, tenant a queues 1,000 one-turn runs, then tenant b
// 10 (the workflow's FairnessKey is the input's tenant). The provider
// holds its calls while the runs are started, so that all of a's are
// queued when b's come (5 of a's calls in flight, held, the others
// waiting for a slot in the workers); then it answers. A run finishes
// when it is completed in the store (its UpdatedAt, written at the
// commit after its call). Between b's first start and b's last finish,
// fewer than 100 of a's runs may finish.
//
// The runs use the consumer's default MaxAckPending (1,000): a's
// queued steps hold the fleet's unacked messages, so b's are delivered
// only as a's finish; the round-robin then serves b in turn.
func TestFlowFairness(t *testing.T) {
	if os.Getenv("DURABLE_FLOWFLEET") == "" {
		t.Skip("about 20 s: run with DURABLE_FLOWFLEET=1 go test -run TestFlowFairness ./internal/test/flowfleet (make flowfleet)")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			d := deploy(t, kind, limits{all: limit}, nWorkers, concurrency, func() time.Duration { return 5 * time.Millisecond })
			open := d.prov.hold()
			t.Cleanup(open)
			as := d.startMany("a", 1000, 1)
			bQueued := time.Now()
			bs := d.startMany("b", 10, 1)
			t.Logf("%s: 1,010 runs started in %s", kind, time.Since(began).Round(100*time.Millisecond))
			open()
			runs := d.waitCompleted(slices.Concat(bs, as), 2*time.Minute)
			aBefore, aDuring, bLast := fairness(runs, as, bs, bQueued)
			_, peak := d.prov.stats()
			if aDuring >= 100 || peak > limit {
				t.Errorf("%s: %d of a's runs finished between b's first start and b's last finish (peak %d calls in flight); want < 100", kind, aDuring, peak)
			}
			d.checkCalls(slices.Concat(as, bs), 1, 0)
			d.checkLogs()
			t.Logf("%s: b's 10 runs queued after a's 1,000 (%d of a's had finished): %d of a's finished between b's first start and b's last finish (%s after b was queued); peak %d in flight; %s",
				kind, aBefore, aDuring, bLast.Sub(bQueued).Round(time.Millisecond), peak, time.Since(began).Round(100*time.Millisecond))
		})
	}
}

// startMany starts n runs of tenant of `turns` turns each,
// "<tenant>-NNNN", 16 at a time, and returns their ids.
func (d *deployment) startMany(tenant string, n, turns int) []string {
	d.t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%04d", tenant, i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d.start(ids[i], tenant, turns)
		})
	}
	wg.Wait()
	return ids
}

// fairness counts a's runs finished before b was queued, and those
// finished from then until b's last finish, which it returns.
func fairness(runs map[string]checkpoint.Run, as, bs []string, bQueued time.Time) (aBefore, aDuring int, bLast time.Time) {
	for _, id := range bs {
		if t := runs[id].UpdatedAt; t.After(bLast) {
			bLast = t
		}
	}
	for _, id := range as {
		switch t := runs[id].UpdatedAt; {
		case t.Before(bQueued):
			aBefore++
		case !t.After(bLast):
			aDuring++
		}
	}
	return aBefore, aDuring, bLast
}
