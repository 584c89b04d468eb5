package checkpointtest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// The deadline index tests pass now explicitly and never sleep: a lease
// "passes" by claiming with a later now.

const lease = 200 * time.Millisecond

func mustIndexDue(t *testing.T, s checkpoint.Store, id string, at time.Time) {
	t.Helper()
	if err := s.IndexDue(ctx(t), id, at); err != nil {
		t.Fatalf("IndexDue(%s, %v): %v", id, at, err)
	}
}

func mustUnindexDue(t *testing.T, s checkpoint.Store, id string) {
	t.Helper()
	if err := s.UnindexDue(ctx(t), id); err != nil {
		t.Fatalf("UnindexDue(%s): %v", id, err)
	}
}

// wantClaim claims with limit at now and checks the ids, in order.
func wantClaim(t *testing.T, s checkpoint.Store, what string, now time.Time, limit int, want ...string) {
	t.Helper()
	got, err := s.ClaimDue(ctx(t), now, limit, lease)
	if err != nil {
		t.Fatalf("%s: ClaimDue(%v, %d): %v", what, now, limit, err)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s: ClaimDue(%v, %d) = %q, want %q", what, now, limit, got, want)
	}
}

func testDueClaimOnce(t *testing.T, s checkpoint.Store) {
	wantClaim(t, s, "empty index", base.Add(time.Hour), 10)

	at := base // sub-millisecond: the index counts whole milliseconds
	mustIndexDue(t, s, "due-1", at)
	wantClaim(t, s, "a millisecond before the deadline", at.Add(-time.Millisecond), 10)
	wantClaim(t, s, "at the deadline", at, 10, "due-1")
	wantClaim(t, s, "claimed, within the lease", at, 10)
	wantClaim(t, s, "claimed, late in the lease", at.Add(lease-time.Millisecond), 10)
	// The claimer died without unindexing: the entry comes back.
	now := at.Add(lease + time.Millisecond)
	wantClaim(t, s, "after the lease", now, 10, "due-1")
	wantClaim(t, s, "claimed again, within the new lease", now.Add(lease/2), 10)
	wantClaim(t, s, "after the second lease", now.Add(lease+time.Millisecond), 10, "due-1")
}

func testDueReindex(t *testing.T, s checkpoint.Store) {
	mustIndexDue(t, s, "re-1", base.Add(time.Minute))
	mustIndexDue(t, s, "re-1", base.Add(time.Hour)) // replaces, not adds
	wantClaim(t, s, "after the replaced time", base.Add(time.Minute), 10)
	wantClaim(t, s, "at the new time", base.Add(time.Hour), 10, "re-1")
	wantClaim(t, s, "claimed once only", base.Add(time.Hour), 10)

	// Re-indexing a claimed entry (a reminder's next deadline) ends its
	// lease: it is due at the new time, even within the old lease.
	mustIndexDue(t, s, "re-1", base.Add(time.Hour+lease/4))
	wantClaim(t, s, "before the new time", base.Add(time.Hour+lease/8), 10)
	wantClaim(t, s, "re-indexed within the old lease", base.Add(time.Hour+lease/4), 10, "re-1")

	// An earlier time brings an entry forward.
	mustIndexDue(t, s, "re-2", base.Add(2*time.Hour))
	mustIndexDue(t, s, "re-2", base.Add(time.Second))
	wantClaim(t, s, "brought forward", base.Add(time.Second), 10, "re-2")
}

func testDueUnindex(t *testing.T, s checkpoint.Store) {
	mustUnindexDue(t, s, "never-indexed")

	mustIndexDue(t, s, "un-a", base)
	mustIndexDue(t, s, "un-b", base.Add(time.Second))
	mustIndexDue(t, s, "un-c", base.Add(2*time.Second))
	mustUnindexDue(t, s, "un-a")
	mustUnindexDue(t, s, "un-a") // twice is fine
	wantClaim(t, s, "after unindexing un-a", base.Add(time.Hour), 10, "un-b", "un-c")

	// A claimed entry the scheduler is done with stays gone after its lease.
	mustUnindexDue(t, s, "un-b")
	wantClaim(t, s, "after the lease of unindexed un-b", base.Add(time.Hour+2*lease), 10, "un-c")

	// Indexing again after a removal works (a run that parks again).
	mustIndexDue(t, s, "un-a", base.Add(3*time.Second))
	wantClaim(t, s, "re-indexed after removal", base.Add(3*time.Second), 10, "un-a")
}

func mustFinishDue(t *testing.T, s checkpoint.Store, id string, leaseUntil, next time.Time) {
	t.Helper()
	if err := s.FinishDue(ctx(t), leaseUntil, checkpoint.DueNext{ID: id, Next: next}); err != nil {
		t.Fatalf("FinishDue(%v, %s, %v): %v", leaseUntil, id, next, err)
	}
}

// A claimer finishes its claim: the entry it claimed is removed or moved,
// but an entry written since (the run parked again, or claimed again after
// the lease lapsed) is left to its writer.
func testDueFinish(t *testing.T, s checkpoint.Store) {
	mustFinishDue(t, s, "fin-never-indexed", base.Add(lease), time.Time{})

	mustIndexDue(t, s, "fin-1", base)
	wantClaim(t, s, "fin-1 due", base, 10, "fin-1")
	mustFinishDue(t, s, "fin-1", base.Add(lease), time.Time{})
	wantClaim(t, s, "fin-1 finished: removed", base.Add(time.Hour), 10)

	mustIndexDue(t, s, "fin-2", base)
	wantClaim(t, s, "fin-2 due", base, 10, "fin-2")
	mustFinishDue(t, s, "fin-2", base.Add(lease), base.Add(time.Minute))
	wantClaim(t, s, "fin-2 moved: not due before", base.Add(time.Minute-time.Millisecond), 10)
	wantClaim(t, s, "fin-2 moved: due at next", base.Add(time.Minute), 10, "fin-2")
	mustFinishDue(t, s, "fin-2", base.Add(time.Minute+lease), time.Time{})

	// The woken step parked the run again before the claimer finished:
	// its new deadline stands, whether it is in or after the old lease.
	for i, again := range []time.Duration{lease / 2, time.Minute} {
		id := fmt.Sprintf("fin-parked-%d", i)
		mustIndexDue(t, s, id, base)
		wantClaim(t, s, id+" due", base, 10, id)
		mustIndexDue(t, s, id, base.Add(again))
		mustFinishDue(t, s, id, base.Add(lease), time.Time{})
		mustFinishDue(t, s, id, base.Add(lease), base.Add(time.Hour))
		wantClaim(t, s, id+": the new deadline stands", base.Add(again), 10, id)
		mustFinishDue(t, s, id, base.Add(again+lease), time.Time{})
	}

	// A claimer outlived its lease and another claimed the entry: the
	// late finish leaves the second claim alone.
	mustIndexDue(t, s, "fin-late", base)
	wantClaim(t, s, "fin-late first claim", base, 10, "fin-late")
	second := base.Add(lease + time.Millisecond)
	wantClaim(t, s, "fin-late second claim", second, 10, "fin-late")
	mustFinishDue(t, s, "fin-late", base.Add(lease), time.Time{})
	wantClaim(t, s, "fin-late: the second claim holds", second.Add(lease-time.Millisecond), 10)
	wantClaim(t, s, "fin-late: back after the second lease", second.Add(lease+time.Millisecond), 10, "fin-late")
	mustFinishDue(t, s, "fin-late", second.Add(lease+time.Millisecond).Add(lease), time.Time{})
	wantClaim(t, s, "fin-late finished by its last claimer", base.Add(time.Hour), 10)

	testDueFinishBatch(t, s)
}

// One FinishDue call ends a whole claim: each entry is removed, moved or
// left as one call per entry would, whatever the others hold.
func testDueFinishBatch(t *testing.T, s checkpoint.Store) {
	if err := s.FinishDue(ctx(t), base); err != nil {
		t.Fatalf("FinishDue of nothing: %v", err)
	}
	ids := []string{"fb-a-late", "fb-b-done", "fb-c-moved", "fb-d-parked"}
	for _, id := range ids {
		mustIndexDue(t, s, id, base)
	}
	wantClaim(t, s, "fb claim", base, 10, ids...)
	// Meanwhile the run of fb-d parks again, and fb-a's claim lapses and
	// another claimer (the first in due order) takes it.
	mustIndexDue(t, s, "fb-d-parked", base.Add(time.Minute))
	second := base.Add(lease + time.Millisecond)
	wantClaim(t, s, "fb-a claimed again", second, 1, "fb-a-late")
	err := s.FinishDue(ctx(t), base.Add(lease),
		checkpoint.DueNext{ID: "fb-a-late"}, checkpoint.DueNext{ID: "fb-b-done"},
		checkpoint.DueNext{ID: "fb-c-moved", Next: base.Add(30 * time.Second)},
		checkpoint.DueNext{ID: "fb-d-parked"}, checkpoint.DueNext{ID: "fb-never-indexed"})
	if err != nil {
		t.Fatalf("FinishDue of a claim: %v", err)
	}
	wantClaim(t, s, "fb: the second claim holds, the rest is not due", second.Add(lease/2), 10)
	wantClaim(t, s, "fb-c moved", base.Add(30*time.Second), 10, "fb-a-late", "fb-c-moved")
	// fb-a and fb-c come back after the lease of that claim (200ms).
	wantClaim(t, s, "fb-d's new deadline stands, fb-b is gone", base.Add(time.Minute), 10, "fb-a-late", "fb-c-moved", "fb-d-parked")
	if err := s.FinishDue(ctx(t), base.Add(time.Minute+lease), checkpoint.DueNext{ID: "fb-a-late"},
		checkpoint.DueNext{ID: "fb-c-moved"}, checkpoint.DueNext{ID: "fb-d-parked"}); err != nil {
		t.Fatal(err)
	}
	wantClaim(t, s, "fb all finished", base.Add(2*time.Hour), 10)
}

func testDueLimitAndOrder(t *testing.T, s checkpoint.Store) {
	// Indexed out of order; each id's number is its offset in seconds.
	for _, n := range []int{7, 2, 9, 0, 5, 3, 8, 1, 6, 4, 11, 10} {
		mustIndexDue(t, s, fmt.Sprintf("ord-%02d", n), base.Add(time.Duration(n)*time.Second))
	}
	now := base.Add(9900 * time.Millisecond) // ord-10 and ord-11 not yet due
	// The leases taken at now last until after ord-10 is due.
	wantClaim(t, s, "first 3", now, 3, "ord-00", "ord-01", "ord-02")
	wantClaim(t, s, "next 4", now, 4, "ord-03", "ord-04", "ord-05", "ord-06")
	wantClaim(t, s, "the rest that is due", now, 10, "ord-07", "ord-08", "ord-09")
	wantClaim(t, s, "nothing more is due", now, 10)
	wantClaim(t, s, "one more second", base.Add(10*time.Second), 1, "ord-10")

}

// An entry whose lease lapsed ranks by the lease's end, between entries
// due before and after it.
func testDueLapsedLeaseOrder(t *testing.T, s checkpoint.Store) {
	mustIndexDue(t, s, "o-late", base)
	wantClaim(t, s, "o-late", base, 10, "o-late")
	mustIndexDue(t, s, "o-c", base.Add(lease+50*time.Millisecond))
	mustIndexDue(t, s, "o-b", base.Add(lease-50*time.Millisecond))
	mustIndexDue(t, s, "o-a", base.Add(-time.Second))
	wantClaim(t, s, "in claimable order", base.Add(2*lease), 10, "o-a", "o-b", "o-late", "o-c")
}

// Schedulers sweep at once: every due entry must reach exactly one of them.
func testDueConcurrentClaimers(t *testing.T, s checkpoint.Store) {
	const (
		entries  = 1000
		claimers = 5
		limit    = 50
	)
	ids := make([]string, entries)
	for i := range ids {
		ids[i] = fmt.Sprintf("conc-%04d", i)
	}
	indexConcurrently(t, s, ids)

	now := base.Add(time.Hour)
	const longLease = time.Minute // outlasts the test: a claim is never handed out twice
	began := time.Now()
	claimed, rounds, err := claimConcurrently(t, s, claimers, now, limit, longLease)
	t.Logf("%d claimers took %v to claim and finish %d entries (rounds per claimer %v)",
		claimers, time.Since(began).Round(time.Millisecond), entries, rounds)
	if err != nil {
		t.Fatal(err)
	}
	wantClaimedOnce(t, ids, claimed)
	// Everything was finished: nothing comes back after the leases.
	wantClaim(t, s, "after every lease", now.Add(2*longLease), entries)
}

// Claimers finish each entry the moment they claimed it, as a scheduler
// does when its work is quick: the finish must see the claim it ends (on
// a replicated store, the write acknowledged just before), or the entry
// stays leased and comes back after the lease: a wait would expire twice.
func testDueFinishRightAfterClaim(t *testing.T, s checkpoint.Store) {
	const (
		entries  = 100
		claimers = 8
	)
	ids := make([]string, entries)
	for i := range ids {
		ids[i] = fmt.Sprintf("quick-%03d", i)
	}
	indexConcurrently(t, s, ids)

	now := base.Add(time.Hour)
	const longLease = time.Minute
	claimed, _, err := claimConcurrently(t, s, claimers, now, 1, longLease)
	if err != nil {
		t.Fatal(err)
	}
	wantClaimedOnce(t, ids, claimed)
	wantClaim(t, s, "after every lease", now.Add(2*longLease), entries)
}

// indexConcurrently indexes ids[i] due at base+i ms, from 10 goroutines.
func indexConcurrently(t *testing.T, s checkpoint.Store, ids []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ids); i += 10 {
				if err := s.IndexDue(ctx(t), ids[i], base.Add(time.Duration(i)*time.Millisecond)); err != nil {
					errs <- fmt.Errorf("IndexDue(%s): %w", ids[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// claimConcurrently starts claimers at once, each claiming at now and
// finishing what it claimed until nothing is due, and returns what each
// claimed in how many rounds.
func claimConcurrently(t *testing.T, s checkpoint.Store, claimers int, now time.Time, limit int, claimLease time.Duration) ([][]string, []int, error) {
	claimed := make([][]string, claimers)
	rounds := make([]int, claimers)
	errs := make([]error, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			claimed[c], rounds[c], errs[c] = claimUntilNoneDue(t, s, now, limit, claimLease)
		}()
	}
	close(start)
	wg.Wait()
	return claimed, rounds, errors.Join(errs...)
}

// claimUntilNoneDue is one claimer of claimConcurrently.
func claimUntilNoneDue(t *testing.T, s checkpoint.Store, now time.Time, limit int, claimLease time.Duration) (claimed []string, rounds int, err error) {
	for {
		got, err := s.ClaimDue(ctx(t), now, limit, claimLease)
		if err != nil {
			return claimed, rounds, err
		}
		if len(got) == 0 {
			return claimed, rounds, nil
		}
		if len(got) > limit {
			return claimed, rounds, fmt.Errorf("ClaimDue returned %d ids, limit %d", len(got), limit)
		}
		rounds++
		claimed = append(claimed, got...)
		done := make([]checkpoint.DueNext, len(got))
		for i, id := range got {
			done[i] = checkpoint.DueNext{ID: id}
		}
		if err := s.FinishDue(ctx(t), now.Add(claimLease), done...); err != nil {
			return claimed, rounds, err
		}
	}
}

// wantClaimedOnce checks that every id of ids, and no other, was claimed
// by exactly one claimer.
func wantClaimedOnce(t *testing.T, ids []string, claimed [][]string) {
	t.Helper()
	times := make(map[string]int, len(ids))
	for _, got := range claimed {
		for _, id := range got {
			times[id]++
		}
	}
	for _, id := range ids {
		if times[id] != 1 {
			t.Errorf("%s claimed %d times, want once", id, times[id])
		}
	}
	if len(times) != len(ids) {
		t.Errorf("%d distinct ids claimed, want %d", len(times), len(ids))
	}
}

func testDueInvalid(t *testing.T, s checkpoint.Store) {
	for _, id := range []string{"", "a.b", "a*", "a>", "a b", "a{b}", strings.Repeat("x", 129)} {
		wantErr(t, fmt.Sprintf("IndexDue(%q)", id), s.IndexDue(ctx(t), id, base), checkpoint.ErrNotFound)
		wantErr(t, fmt.Sprintf("UnindexDue(%q)", id), s.UnindexDue(ctx(t), id), checkpoint.ErrNotFound)
		wantErr(t, fmt.Sprintf("FinishDue(%q)", id), s.FinishDue(ctx(t), base, checkpoint.DueNext{ID: id}), checkpoint.ErrNotFound)
	}
	mustIndexDue(t, s, "valid-1", base)
	for _, tc := range []struct {
		limit int
		lease time.Duration
	}{{0, lease}, {-1, lease}, {10, 0}, {10, -time.Second}, {10, time.Microsecond}} {
		if got, err := s.ClaimDue(ctx(t), base.Add(time.Hour), tc.limit, tc.lease); err == nil {
			t.Errorf("ClaimDue(limit %d, lease %v) = %q, want an error", tc.limit, tc.lease, got)
		}
	}
	// Nothing was indexed by the refused calls, and valid-1 was not claimed.
	wantClaim(t, s, "after invalid calls", base.Add(time.Hour), 100, "valid-1")
	// A finish with one invalid id among valid ones changes nothing.
	leaseUntil := base.Add(time.Hour + lease)
	wantErr(t, "FinishDue of valid-1 and an invalid id",
		s.FinishDue(ctx(t), leaseUntil, checkpoint.DueNext{ID: "valid-1"}, checkpoint.DueNext{ID: "a.b"}), checkpoint.ErrNotFound)
	wantClaim(t, s, "valid-1 still claimed", base.Add(time.Hour+lease/2), 100)
	wantClaim(t, s, "valid-1 back after its lease", leaseUntil.Add(time.Millisecond), 100, "valid-1")
}
