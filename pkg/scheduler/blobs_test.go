package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/scheduler"
)

// With --blob-retention the scheduler deletes the blobs of runs that ended
// longer ago than the retention, and keeps those of live runs and of runs
// that ended recently.
func TestSchedulerDeletesBlobsOfEndedRuns(t *testing.T) {
	f := testfleet.New(t, "redis")
	ctx := context.Background()
	blobs, err := objstore.New(ctx, f.JS, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for id, r := range map[string]struct {
		status checkpoint.Status
		ended  time.Time
	}{
		"old-done":   {checkpoint.StatusCompleted, now.Add(-48 * time.Hour)},
		"old-dead":   {checkpoint.StatusDead, now.Add(-48 * time.Hour)},
		"fresh-done": {checkpoint.StatusCompleted, now.Add(-time.Hour)},
		"old-live":   {checkpoint.StatusWaiting, now.Add(-48 * time.Hour)},
	} {
		if _, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "w", Status: r.status, Step: 1, CreatedAt: r.ended, UpdatedAt: r.ended}); err != nil {
			t.Fatal(err)
		}
		data := []byte("document of " + id)
		name, err := blob.ObjectName(id, 1, "doc.pdf", blob.Digest(data))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := blobs.Put(ctx, name, data); err != nil {
			t.Fatal(err)
		}
	}
	sch, err := scheduler.New(scheduler.Config{Client: f.Client, Blobs: blobs, BlobRetention: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sch.SweepBlobs(ctx)
	if n := sch.Stats().BlobsDeleted; n != 2 {
		t.Errorf("%d blobs deleted, want 2 (the runs that ended 48h ago)", n)
	}
	for id, want := range map[string]int{"old-done": 0, "old-dead": 0, "fresh-done": 1, "old-live": 1} {
		got, err := blobs.List(ctx, blob.RunPrefix(id))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != want {
			t.Errorf("run %s keeps %d blobs, want %d", id, len(got), want)
		}
	}
	if _, err := scheduler.New(scheduler.Config{Client: f.Client, BlobRetention: time.Hour}); err == nil {
		t.Error("a blob retention without a blob store was accepted")
	}
}
