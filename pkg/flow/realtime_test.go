package flow_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// The acceptance, shortened: 10/s with a burst of 5 over 3 s of
// the wall clock, taken by 4 takers on separate connections (as 4
// workers would) that wait as they are told: after the burst the tokens
// come at 10/s, within 10 %.
func TestTakeRealTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 s of the wall clock")
	}
	const (
		takers = 4
		span   = 3 * time.Second
	)
	rate := flow.Rate{N: 10, Per: time.Second, Burst: 5}
	srv := testenv.StartNATS(t)
	admin, _ := newStore(t, srv, flow.StoreOptions{})
	set(t, admin, "model", rate)
	lims := make([]*flow.Limiter, takers)
	for i := range lims {
		st, _ := newStore(t, srv, flow.StoreOptions{})
		lims[i] = flow.NewLimiter(st, flow.LimiterOptions{})
	}

	for _, lim := range lims { // each reads the limits' names first
		if _, err := lim.Take(ctxT(t), "warm-up", time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// The span is measured from the first token; the takers go on a
	// little longer, so that the token due at its very end is in.
	ctx, cancel := context.WithTimeout(ctxT(t), span+200*time.Millisecond)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	// When each token was taken, since start: the time its Take was
	// given (the call then takes a round trip).
	var taken []time.Duration
	var wg sync.WaitGroup
	for _, lim := range lims {
		wg.Go(func() {
			for {
				now := time.Now()
				wait, err := lim.Take(ctx, "model", now)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if wait == 0 {
					mu.Lock()
					taken = append(taken, now.Sub(start))
					mu.Unlock()
					continue
				}
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return
				case <-timer.C:
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(taken, func(i, j int) bool { return taken[i] < taken[j] })
	for len(taken) > 0 && taken[len(taken)-1]-taken[0] > span {
		taken = taken[:len(taken)-1]
	}

	// The burst: 5 at once.
	if len(taken) < rate.Burst || taken[rate.Burst-1]-taken[0] > 100*time.Millisecond {
		t.Fatalf("the burst: %v", taken)
	}
	paced := len(taken) - rate.Burst
	observed := float64(paced) / span.Seconds()
	// The same between the last token of the burst and the last one taken.
	between := float64(paced) / (taken[len(taken)-1] - taken[rate.Burst-1]).Seconds()
	t.Logf("%d takers: %d tokens in %s: the burst of %d, then %d at %.2f/s (%.2f/s between the burst and the last; limit 10/s)",
		takers, len(taken), span, rate.Burst, paced, observed, between)
	if observed < 9 || observed > 11 {
		t.Errorf("observed %.2f/s after the burst; want 10/s within 10%%", observed)
	}
	// Never ahead of the limit at any moment.
	for i, d := range taken {
		d -= taken[0]
		if allowed := rate.Burst + int(d/(100*time.Millisecond)); i+1 > allowed {
			t.Errorf("token %d at %s: the limit allows %d by then", i+1, d, allowed)
		}
	}
}
