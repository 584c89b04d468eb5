package flow_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// take is one Take at a simulated time and the wait it must answer.
type take struct {
	at, wait time.Duration
}

// GCRA: a burst from idle, then the steady pace, and the waits between.
func TestTakeGCRA(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  flow.Rate
		takes []take
	}{
		{name: "burst then pace", rate: flow.Rate{N: 10, Per: time.Second, Burst: 3}, takes: []take{
			{0, 0}, {0, 0}, {0, 0}, // the burst, at once
			{0, ms(100)}, // the next token comes one interval (100ms) later
			{ms(50), ms(50)},
			{ms(100), 0},
			{ms(100), ms(100)},
			{ms(199), ms(1)},
			{ms(250), 0}, // late: the pace does not bank the 50ms
			{ms(250), ms(50)},
			{ms(300), 0},
			// idle for long enough to refill the whole burst, and no more
			{ms(2000), 0}, {ms(2000), 0}, {ms(2000), 0}, {ms(2000), ms(100)},
			// two tokens back after 200ms
			{ms(2200), 0}, {ms(2200), 0}, {ms(2200), ms(100)},
		}},
		{name: "no burst", rate: flow.Rate{N: 1, Per: time.Second, Burst: 1}, takes: []take{
			{0, 0}, {0, time.Second}, {ms(999), ms(1)}, {ms(1000), 0}, {ms(1000), time.Second},
			{ms(1500), ms(500)}, {ms(2000), 0},
		}},
		{name: "per minute", rate: flow.Rate{N: 600, Per: time.Minute, Burst: 2}, takes: []take{
			{0, 0}, {0, 0}, {0, ms(100)}, {ms(100), 0}, {ms(100), ms(100)},
		}},
		{name: "per hour", rate: flow.Rate{N: 1000, Per: time.Hour, Burst: 1}, takes: []take{
			{0, 0}, {0, ms(3600)}, {ms(3600), 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testenv.StartNATS(t)
			st, js := newStore(t, srv, flow.StoreOptions{})
			ctx := ctxT(t)
			set(t, st, "model", tc.rate)
			for i, tk := range tc.takes {
				rev := revision(t, js, "model")
				wait, err := st.Take(ctx, "model", at(tk.at))
				if err != nil || wait != tk.wait {
					t.Fatalf("take %d at +%s: wait %s, %v; want %s", i, tk.at, wait, err, tk.wait)
				}
				// A token taken is a write; a refusal writes nothing.
				if wrote := revision(t, js, "model") != rev; wrote != (wait == 0) {
					t.Fatalf("take %d at +%s: wrote %t with wait %s", i, tk.at, wrote, wait)
				}
			}
		})
	}
}

// A name with no limit: every Take answers 0 and nothing is written.
func TestTakeUnlimited(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	ctx := ctxT(t)
	for range 100 {
		if wait, err := st.Take(ctx, "free", t0); wait != 0 || err != nil {
			t.Fatalf("take: %s, %v", wait, err)
		}
	}
	if rev := revision(t, js, "free"); rev != 0 {
		t.Errorf("a take of a name with no limit wrote revision %d", rev)
	}
	if all, err := st.List(ctx); err != nil || len(all) != 0 {
		t.Errorf("list %v, %v", all, err)
	}
}

// Takers on separate connections (as separate workers would be), all at
// once at each step of a simulated clock: together they take exactly what
// the rate and burst allow, never more (no token taken twice) and never
// less (no token lost: a take that says it took did).
func TestTakeConcurrent(t *testing.T) {
	const (
		takers = 8
		steps  = 60
		step   = 37 * time.Millisecond // not a multiple of the 10ms interval
	)
	rate := flow.Rate{N: 100, Per: time.Second, Burst: 20}
	srv := testenv.StartNATS(t)
	sweeper, _ := newStore(t, srv, flow.StoreOptions{})
	set(t, sweeper, "model", rate)
	stores := make([]*flow.Store, takers)
	for i := range stores {
		stores[i], _ = newStore(t, srv, flow.StoreOptions{})
	}
	ctx := ctxT(t)
	total, swept := 0, 0
	for s := range steps {
		now := at(time.Duration(s) * step)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, st := range stores {
			wg.Go(func() {
				for range 100 {
					wait, err := st.Take(ctx, "model", now)
					if err != nil {
						t.Error(err)
						return
					}
					if wait > 0 {
						return
					}
					mu.Lock()
					total++
					mu.Unlock()
				}
				t.Error("100 tokens in a row")
			})
		}
		wg.Wait()
		// GCRA allows Burst at t0, then one each interval: 20 + ⌊elapsed/10ms⌋.
		want := rate.Burst + int(time.Duration(s)*step/(10*time.Millisecond))
		if total > want {
			t.Fatalf("step %d (+%s): %d tokens taken, the rate allows %d", s, time.Duration(s)*step, total, want)
		}
		// A taker that lost too many compare-and-sets in a row may have
		// stopped early: one more taker, alone, takes what is left.
		for {
			wait, err := sweeper.Take(ctx, "model", now)
			if err != nil {
				t.Fatal(err)
			}
			if wait > 0 {
				break
			}
			total++
			swept++
		}
		if total != want {
			t.Fatalf("step %d (+%s): %d tokens taken, want %d", s, time.Duration(s)*step, total, want)
		}
	}
	t.Logf("%d takers took %d tokens over %s of simulated time (%d left to the sweeper)", takers, total, (steps-1)*step, swept)
}

// A slow-down blocks every Take until its end; the later end wins; the
// limit then resumes at its pace, without a burst.
func TestSlowDown(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	other, _ := newStore(t, srv, flow.StoreOptions{})
	ctx := ctxT(t)
	set(t, st, "model", flow.Rate{N: 10, Per: time.Second, Burst: 5})
	if wait, err := st.Take(ctx, "model", t0); wait != 0 || err != nil {
		t.Fatalf("first take: %s, %v", wait, err)
	}

	if err := st.SlowDown(ctx, "model", at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Seen by another process's store at once.
	if wait, err := other.Take(ctx, "model", at(ms(500))); wait != ms(1500) || err != nil {
		t.Errorf("take while blocked: %s, %v; want 1.5s", wait, err)
	}
	// An earlier end changes nothing, and writes nothing.
	rev := revision(t, js, "model")
	if err := other.SlowDown(ctx, "model", at(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := other.SlowDown(ctx, "model", at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := revision(t, js, "model"); got != rev {
		t.Errorf("an earlier slow-down wrote revision %d over %d", got, rev)
	}
	if wait, _ := st.Take(ctx, "model", at(ms(500))); wait != ms(1500) {
		t.Errorf("take after an earlier slow-down: %s; want 1.5s", wait)
	}
	// A later one wins.
	if err := other.SlowDown(ctx, "model", at(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if l, err := st.Get(ctx, "model"); err != nil || !l.BlockedUntil.Equal(at(3*time.Second)) {
		t.Errorf("get %+v, %v", l, err)
	}
	if wait, _ := st.Take(ctx, "model", at(2*time.Second)); wait != time.Second {
		t.Errorf("take after a later slow-down: %s; want 1s", wait)
	}
	// At its end: one token, then the pace (100ms), no burst of 5.
	for _, tk := range []take{{3 * time.Second, 0}, {3 * time.Second, ms(100)}, {ms(3100), 0}, {ms(3100), ms(100)}} {
		if wait, err := st.Take(ctx, "model", at(tk.at)); wait != tk.wait || err != nil {
			t.Errorf("take at +%s after the block: %s, %v; want %s", tk.at, wait, err, tk.wait)
		}
	}
	// After a quiet spell the burst is back.
	for i := range 5 {
		if wait, _ := st.Take(ctx, "model", at(10*time.Second)); wait != 0 {
			t.Errorf("burst take %d after quiet: %s", i, wait)
		}
	}
}

// A slow-down of a name with no limit: held in a record of its own,
// blocking Take, and gone after its end; Set turns it into a limit.
func TestSlowDownUnlimited(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, js := newStore(t, srv, flow.StoreOptions{})
	ctx := ctxT(t)
	if err := st.SlowDown(ctx, "ghost", at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := st.Get(ctx, "ghost")
	if err != nil || l.Rate != (flow.Rate{}) || !l.BlockedUntil.Equal(at(2*time.Second)) {
		t.Fatalf("get %+v, %v", l, err)
	}
	rev := revision(t, js, "ghost")
	for _, tk := range []take{{0, 2 * time.Second}, {ms(1999), ms(1)}, {2 * time.Second, 0}, {2 * time.Second, 0}} {
		if wait, err := st.Take(ctx, "ghost", at(tk.at)); wait != tk.wait || err != nil {
			t.Errorf("take at +%s: %s, %v; want %s", tk.at, wait, err, tk.wait)
		}
	}
	if got := revision(t, js, "ghost"); got != rev {
		t.Errorf("takes of a slow-down only wrote revision %d over %d", got, rev)
	}
	// A later slow-down extends it.
	if err := st.SlowDown(ctx, "ghost", at(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if wait, _ := st.Take(ctx, "ghost", at(3*time.Second)); wait != time.Second {
		t.Errorf("take after extending: %s; want 1s", wait)
	}

	// Set: a limit for good, still blocked, resuming at its pace.
	st.SetClock(func() time.Time { return at(3 * time.Second) })
	set(t, st, "ghost", flow.Rate{N: 10, Per: time.Second, Burst: 5})
	for _, tk := range []take{{3 * time.Second, time.Second}, {4 * time.Second, 0}, {4 * time.Second, ms(100)}} {
		if wait, err := st.Take(ctx, "ghost", at(tk.at)); wait != tk.wait || err != nil {
			t.Errorf("take of the limit set at +%s: %s, %v; want %s", tk.at, wait, err, tk.wait)
		}
	}
}

// A record holding a slow-down only goes by itself after the block (plus
// a linger; the test's is a second), freeing its room.
func TestSlowDownExpires(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{MaxLimits: 1})
	st.SetLinger(time.Second)
	ctx := ctxT(t)
	// This one is the wall clock's: the server expires records in real time.
	if err := st.SlowDown(ctx, "ghost", time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := st.SlowDown(ctx, "ghost", time.Now().Add(2*time.Second)); err != nil { // extended
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "the slow-down's record to go", func() bool {
		_, err := st.Get(ctx, "ghost")
		return errors.Is(err, flow.ErrNotFound)
	})
	if gone := time.Since(start); gone < 2*time.Second {
		t.Errorf("gone after %s, before the extended block and its linger", gone)
	}
	set(t, st, "model", flow.Rate{N: 1, Per: time.Second, Burst: 1})
}

// A rate set once a slow-down has ended starts afresh, with its full
// burst (review of this package: the ended block still held it to its
// pace, 60 tokens of a burst of 100 a minute later).
func TestSetAfterAnEndedSlowDown(t *testing.T) {
	srv := testenv.StartNATS(t)
	st, _ := newStore(t, srv, flow.StoreOptions{})
	ctx := ctxT(t)
	set(t, st, "api", flow.Rate{N: 1, Per: time.Second, Burst: 1})
	if err := st.SlowDown(ctx, "api", at(time.Second)); err != nil {
		t.Fatal(err)
	}
	st.SetClock(func() time.Time { return at(2 * time.Second) }) // the block has ended
	set(t, st, "api", flow.Rate{N: 1, Per: time.Second, Burst: 100})
	taken := 0
	for {
		wait, err := st.Take(ctx, "api", at(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if wait > 0 {
			break
		}
		taken++
	}
	if taken != 100 {
		t.Fatalf("%d tokens at once after a rate set past the slow-down, want the burst of 100", taken)
	}
}
