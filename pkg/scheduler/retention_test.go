package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/scheduler"
)

// Retention purges the runs that ended before it and only those: a run
// waiting since before the retention, a child whose parent is live, a
// parent with a live child and a dead run still in the dead-letter stream
// stay; a purged id is refused to a new start.
func TestRetentionPurgesOnlyWhatItShould(t *testing.T) {
	for _, kind := range retentionKinds(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			ctx := context.Background()
			now := time.Now().UTC()
			old, fresh := now.Add(-40*24*time.Hour), now.Add(-24*time.Hour)
			create := func(run checkpoint.Run, at time.Time) {
				t.Helper()
				run.Workflow, run.Step, run.CreatedAt, run.UpdatedAt = "w", 1, at, at
				if _, err := f.Store.CreateRun(ctx, run); err != nil {
					t.Fatal(err)
				}
			}
			create(checkpoint.Run{ID: "old-done", Status: checkpoint.StatusCompleted}, old)
			create(checkpoint.Run{ID: "old-dead-gone", Status: checkpoint.StatusDead}, old)
			create(checkpoint.Run{ID: "old-dead-dlq", Status: checkpoint.StatusDead}, old)
			create(checkpoint.Run{ID: "fresh-done", Status: checkpoint.StatusCompleted}, fresh)
			create(checkpoint.Run{ID: "old-waiting", Status: checkpoint.StatusWaiting}, old)
			create(checkpoint.Run{ID: "live-parent", Status: checkpoint.StatusWaiting}, old)
			create(checkpoint.Run{ID: "old-child", Status: checkpoint.StatusCompleted, Parent: &checkpoint.ParentRef{RunID: "live-parent", Step: 1}}, old)
			create(checkpoint.Run{ID: "old-child-of-dlq", Status: checkpoint.StatusCompleted, Parent: &checkpoint.ParentRef{RunID: "old-dead-dlq", Step: 1}}, old)
			create(checkpoint.Run{ID: "old-parent", Status: checkpoint.StatusRunning}, old)
			create(checkpoint.Run{ID: "live-child", Status: checkpoint.StatusRunning, Parent: &checkpoint.ParentRef{RunID: "old-parent", Step: 1}}, old)
			parent := f.Get("old-parent")
			parent.Step, parent.Status, parent.UpdatedAt = 2, checkpoint.StatusCancelled, old
			if _, err := f.Store.Commit(ctx, parent, checkpoint.Checkpoint{Step: 1, State: []byte(`{}`), Children: []checkpoint.Child{{ID: "live-child", Workflow: "w"}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.JS.CreateOrUpdateStream(ctx, queue.DLQStreamConfig(queue.Config{})); err != nil {
				t.Fatal(err)
			}
			if err := queue.PublishDeadLetter(ctx, f.JS, f.Get("old-dead-dlq"), queue.DeadLetter{RunID: "old-dead-dlq", Workflow: "w", Step: 1, Reason: "boom", At: old}); err != nil {
				t.Fatal(err)
			}

			if err := f.Store.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "w", Version: 1, FirstStep: "a", Steps: []string{"a"}}); err != nil {
				t.Fatal(err)
			}
			sch, err := scheduler.New(scheduler.Config{Client: f.Client, Retention: 30 * 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			res := sch.Purge(ctx)
			purged := []string{"old-done", "old-dead-gone"}
			if res.Purged != 2 || sch.Stats().Purged != 2 {
				t.Errorf("purge = %+v (stats %d), want 2 purged: %v", res, sch.Stats().Purged, purged)
			}
			for _, id := range purged {
				if _, err := f.Store.GetRun(ctx, id); !errors.Is(err, checkpoint.ErrPurged) {
					t.Errorf("%s after the purge: %v, want purged", id, err)
				}
			}
			for _, id := range []string{"old-dead-dlq", "old-child-of-dlq", "fresh-done", "old-waiting", "live-parent", "old-child", "old-parent", "live-child"} {
				if _, err := f.Store.GetRun(ctx, id); err != nil {
					t.Errorf("%s after the purge: %v, want it kept", id, err)
				}
			}
			_, _, err = f.Client.Start(ctx, client.StartRequest{Workflow: "w", RunID: "old-done"})
			if !errors.Is(err, client.ErrRunIDTaken) || !errors.Is(err, checkpoint.ErrPurged) {
				t.Errorf("start of a purged id = %v, want ErrRunIDTaken and ErrPurged", err)
			}
			// runs show (Inspect) says when it ended and that it was purged.
			_, err = f.Client.Inspect(ctx, "old-done")
			var purgedErr *checkpoint.PurgedError
			if !errors.As(err, &purgedErr) || !purgedErr.Tombstone.EndedAt.Equal(old.Truncate(time.Millisecond)) || !strings.Contains(err.Error(), "purged") {
				t.Errorf("inspect of a purged run = %v, want its tombstone: ended %s, purged", err, old)
			}
		})
	}
}

// Two schedulers purging at once purge each run once.
func TestTwoSchedulersPurgeEachRunOnce(t *testing.T) {
	for _, kind := range retentionKinds(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			ctx := context.Background()
			old := time.Now().Add(-40 * 24 * time.Hour)
			const n = 1200
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < n; i += 8 {
						run := checkpoint.Run{ID: fmt.Sprintf("done-%04d", i), Workflow: "w", Step: 1, Status: checkpoint.StatusCompleted, CreatedAt: old, UpdatedAt: old}
						if _, err := f.Store.CreateRun(ctx, run); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			var results [2]scheduler.PurgeResult
			for i := range results {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sch, err := scheduler.New(scheduler.Config{Client: f.Client, Retention: 30 * 24 * time.Hour, PurgeShare: 1})
					if err != nil {
						t.Error(err)
						return
					}
					results[i] = sch.Purge(ctx)
				}()
			}
			wg.Wait()
			t.Logf("scheduler 1: %+v, scheduler 2: %+v", results[0], results[1])
			if got := results[0].Purged + results[1].Purged; got != n {
				t.Errorf("purged %d runs in all, want %d, each once", got, n)
			}
			counts, err := f.Store.CountRuns(ctx)
			if err != nil || counts.Total() != 0 {
				t.Errorf("runs counted after the purge: %+v, %v; want none", counts.Status, err)
			}
		})
	}
}

// stopOnPurge is a store whose first Purge ends the purge pass's context
// (stop), as a SIGTERM does in the middle of a chunk.
type stopOnPurge struct {
	checkpoint.Store
	checkpoint.Retention
	once sync.Once
	stop context.CancelFunc
}

func (s *stopOnPurge) Purge(ctx context.Context, run checkpoint.Run, ttl time.Duration) error {
	s.once.Do(s.stop)
	return s.Retention.Purge(ctx, run, ttl)
}

// A scheduler stopped in the middle of a purge finishes the chunk under
// way and starts no other: each run is purged whole or not touched,
// never left half purged for the next pass (before, every purge of the
// chunk failed with the context's end, some after the tombstone).
func TestStoppedPurgeFinishesItsChunk(t *testing.T) {
	for _, kind := range retentionKinds(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			old := time.Now().Add(-40 * 24 * time.Hour)
			const n = 150
			for i := range n {
				run := checkpoint.Run{ID: fmt.Sprintf("done-%04d", i), Workflow: "w", Step: 1, Status: checkpoint.StatusCompleted, CreatedAt: old, UpdatedAt: old}
				if _, err := f.Store.CreateRun(context.Background(), run); err != nil {
					t.Fatal(err)
				}
			}
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			store := &stopOnPurge{Store: f.Store, Retention: f.Store.(checkpoint.Retention), stop: stop}
			sch, err := scheduler.New(scheduler.Config{Client: client.New(f.JS, store), Retention: 30 * 24 * time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			res := sch.Purge(ctx)
			if res.Purged == 0 || res.Purged >= n || res.Kept+res.Raced != 0 {
				t.Fatalf("stopped purge: %+v; want the first chunk purged, no more, nothing failed", res)
			}
			var gone int
			for i := range n {
				id := fmt.Sprintf("done-%04d", i)
				_, err := f.Store.GetRun(context.Background(), id)
				switch {
				case errors.Is(err, checkpoint.ErrPurged):
					gone++
				case err != nil:
					t.Fatalf("%s: %v", id, err)
				}
			}
			if gone != res.Purged {
				t.Fatalf("%d runs read as purged, the pass purged %d", gone, res.Purged)
			}
			// What is left is purged whole by the next pass.
			sch2, err := scheduler.New(scheduler.Config{Client: f.Client, Retention: 30 * 24 * time.Hour, PurgeShare: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res2 := sch2.Purge(context.Background()); res.Purged+res2.Purged != n {
				t.Fatalf("purged %d, then %d; want %d in all", res.Purged, res2.Purged, n)
			}
		})
	}
}

// A share of the time outside (0, 1] is refused.
func TestPurgeShareChecked(t *testing.T) {
	f := testfleet.New(t, testfleet.Kinds[0])
	for _, share := range []float64{-0.5, 1.5} {
		if _, err := scheduler.New(scheduler.Config{Client: f.Client, PurgeShare: share}); err == nil || !strings.Contains(err.Error(), "PurgeShare") {
			t.Errorf("PurgeShare %g: %v, want it refused", share, err)
		}
	}
}

// retentionKinds are the stores that offer checkpoint.Retention.
func retentionKinds(t *testing.T) []string {
	var kinds []string
	for _, kind := range testfleet.Kinds {
		f := testfleet.New(t, kind)
		if _, ok := f.Store.(checkpoint.Retention); ok {
			kinds = append(kinds, kind)
		} else {
			t.Logf("store %s does not offer retention yet", kind)
		}
	}
	return kinds
}
