package checkpointtest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// testRetention: a store that offers checkpoint.Retention lists the runs
// ended before a cutoff, earliest first and only those, and purges one
// with all it stored, leaving a tombstone that keeps its id taken.
func testRetention(t *testing.T, s checkpoint.Store) {
	r, ok := s.(checkpoint.Retention)
	if !ok {
		t.Skip("the store does not offer checkpoint.Retention")
	}
	ctx := ctx(t)
	day := func(n int) time.Time { return base.Add(time.Duration(n) * 24 * time.Hour) }
	// Ended on days 1, 2 and 3 (created a day before), one live
	// created on day 0, one ended on day 10.
	endAt := map[string]int{"end-a": 2, "end-b": 1, "end-c": 3, "end-late": 10}
	for id, d := range endAt {
		run := newRun(id)
		run.CreatedAt, run.UpdatedAt = day(d-1), day(d-1)
		run, err := s.CreateRun(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		run.UpdatedAt = day(d)
		if _, err := s.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, Name: "only", State: []byte(`{}`), Status: checkpoint.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	for id, d := range endAt {
		run, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		run.Status, run.UpdatedAt = checkpoint.StatusCompleted, day(d)
		if _, err := s.UpdateRun(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	live := newRun("live-old")
	live.CreatedAt, live.UpdatedAt = day(0), day(0)
	if _, err := s.CreateRun(ctx, live); err != nil {
		t.Fatal(err)
	}

	ended, err := r.EndedBefore(ctx, day(5), 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ended); got != "end-b end-a end-c " {
		t.Errorf("EndedBefore(day 5) = %q, want end-b end-a end-c (earliest ended first, live and later ones left out)", got)
	}
	if first, err := r.EndedBefore(ctx, day(5), 1); err != nil || ids(first) != "end-b " {
		t.Errorf("EndedBefore(day 5, limit 1) = %q, %v; want end-b", ids(first), err)
	}

	testPurge(t, s, r, ended, live)
}

// testPurge purges ended[0] (refusing a live run and a stale revision
// first), then ended[1] without a tombstone, and checks what is left.
func testPurge(t *testing.T, s checkpoint.Store, r checkpoint.Retention, ended []checkpoint.Run, live checkpoint.Run) {
	ctx := ctx(t)
	day := func(n int) time.Time { return base.Add(time.Duration(n) * 24 * time.Hour) }
	before, err := s.CountRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Purge(ctx, live, time.Hour); err == nil {
		t.Errorf("Purge of a running run succeeded")
	}
	victim := ended[0]
	stale := victim
	stale.Rev--
	if err := r.Purge(ctx, stale, time.Hour); !errors.Is(err, checkpoint.ErrConflict) {
		t.Errorf("Purge at a stale rev = %v, want ErrConflict", err)
	}
	if err := r.Purge(ctx, victim, time.Hour); err != nil {
		t.Fatalf("Purge(%s) = %v", victim.ID, err)
	}
	if err := r.Purge(ctx, victim, time.Hour); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("second Purge = %v, want ErrNotFound (purged already)", err)
	}

	_, err = s.GetRun(ctx, victim.ID)
	var purged *checkpoint.PurgedError
	if !errors.As(err, &purged) || !errors.Is(err, checkpoint.ErrNotFound) || !errors.Is(err, checkpoint.ErrPurged) {
		t.Fatalf("GetRun of a purged run = %v, want a *PurgedError that is ErrPurged and ErrNotFound", err)
	}
	want := checkpoint.Tombstone{ID: victim.ID, Workflow: "claim", Status: checkpoint.StatusCompleted, EndedAt: day(1).Truncate(time.Millisecond)}
	got := purged.Tombstone
	if got.ID != want.ID || got.Workflow != want.Workflow || got.Status != want.Status || !got.EndedAt.Equal(want.EndedAt) || got.PurgedAt.IsZero() {
		t.Errorf("tombstone = %+v, want %+v with a purge time", got, want)
	}
	if _, err := s.CreateRun(ctx, newRun(victim.ID)); !errors.Is(err, checkpoint.ErrRunExists) || !errors.Is(err, checkpoint.ErrPurged) {
		t.Errorf("CreateRun of a purged id = %v, want ErrRunExists and ErrPurged", err)
	}
	if _, err := s.Checkpoint(ctx, victim.ID, 1); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("checkpoint 1 of a purged run = %v, want ErrNotFound", err)
	}
	if _, err := s.Load(ctx, victim.ID, checkpoint.AtStep(2)); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Load of a purged run = %v, want ErrNotFound", err)
	}

	after, err := s.CountRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status[checkpoint.StatusCompleted] != before.Status[checkpoint.StatusCompleted]-1 ||
		after.Workflow["claim"][checkpoint.StatusCompleted] != before.Workflow["claim"][checkpoint.StatusCompleted]-1 ||
		after.Status[checkpoint.StatusRunning] != before.Status[checkpoint.StatusRunning] {
		t.Errorf("counts after a purge = %v, before %v: want one completed run less", after.Status, before.Status)
	}
	all, err := s.ListRuns(ctx, checkpoint.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(all); got != "live-old end-a end-c end-late " {
		t.Errorf("ListRuns after the purge = %q, want live-old end-a end-c end-late", got)
	}
	page, err := s.PageRuns(ctx, checkpoint.PageQuery{Status: checkpoint.StatusCompleted})
	if err != nil || ids(page.Runs) != "end-late end-c end-a " {
		t.Errorf("PageRuns(completed) after the purge = %q, %v; want end-late end-c end-a", ids(page.Runs), err)
	}
	if ended, err := r.EndedBefore(ctx, day(5), 10); err != nil || ids(ended) != "end-a end-c " {
		t.Errorf("EndedBefore after the purge = %q, %v; want end-a end-c", ids(ended), err)
	}
	if n, err := r.Tombstones(ctx); err != nil || n != 1 {
		t.Errorf("Tombstones = %d, %v; want 1", n, err)
	}

	testPurgeWithoutTombstone(t, s, r, ended[1])
}

// testPurgeWithoutTombstone: a purge that keeps no tombstone frees the id.
func testPurgeWithoutTombstone(t *testing.T, s checkpoint.Store, r checkpoint.Retention, free checkpoint.Run) {
	ctx := ctx(t)
	if err := r.Purge(ctx, free, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(ctx, free.ID); !errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, checkpoint.ErrPurged) {
		t.Errorf("GetRun of a run purged without a tombstone = %v, want plain ErrNotFound", err)
	}
	if n, err := r.Tombstones(ctx); err != nil || n != 1 {
		t.Errorf("Tombstones = %d, %v; want still 1", n, err)
	}
}

// ids joins the ids of runs, each followed by a space.
func ids(runs []checkpoint.Run) string {
	s := ""
	for _, r := range runs {
		s += fmt.Sprintf("%s ", r.ID)
	}
	return s
}
