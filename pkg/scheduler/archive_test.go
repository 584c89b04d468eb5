package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/scheduler"
)

// archiveFixture stores, on f, a run "old-done" that ended 40 days ago
// after two steps with an audit entry, a run "fresh-done" that ended a
// day ago, and a run "old-waiting" waiting for 40 days.
func archiveFixture(t *testing.T, f *testfleet.Fleet) (old time.Time) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	old = now.Add(-40 * 24 * time.Hour).Truncate(time.Millisecond)
	if err := f.Store.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "w", Version: 1, FirstStep: "a", Steps: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []checkpoint.Run{
		{ID: "old-done", Status: checkpoint.StatusRunning},
		{ID: "fresh-done", Status: checkpoint.StatusCompleted, UpdatedAt: now.Add(-24 * time.Hour)},
		{ID: "old-waiting", Status: checkpoint.StatusWaiting},
	} {
		r.Workflow, r.Version, r.Step, r.StepName, r.Input, r.CreatedAt = "w", 1, 1, "a", json.RawMessage(`{"claim":42}`), old
		if r.UpdatedAt.IsZero() {
			r.UpdatedAt = old
		} else {
			r.CreatedAt = r.UpdatedAt
		}
		if _, err := f.Store.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	run := f.Get("old-done")
	run.Step, run.StepName, run.UpdatedAt = 2, "b", old
	run.Audit = append(run.Audit, checkpoint.AuditEntry{At: old, Kind: "note", Step: 1, By: "adjuster-7"})
	run, err := f.Store.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, Name: "a", State: json.RawMessage(`{"paid":false}`), At: old, Attempt: 1, Next: "b"})
	if err != nil {
		t.Fatal(err)
	}
	run.Status, run.UpdatedAt = checkpoint.StatusCompleted, old
	if _, err := f.Store.Commit(ctx, run, checkpoint.Checkpoint{Step: 2, Name: "b", State: json.RawMessage(`{"paid":true}`), At: old, Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	return old
}

// With Config.Archive, retention writes a run to the archive before it
// purges it, and Inspect (what `durable runs show` and GET /api/runs/{id}
// call) reads the purged run from there, with its checkpoints and audit,
// saying that it is archived and when it was purged. Export writes the
// stored ended runs, ExportArchived the archived ones.
func TestArchivedRunIsShownAfterThePurge(t *testing.T) {
	for _, kind := range retentionKinds(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			ctx := context.Background()
			old := archiveFixture(t, f)
			before, err := f.Client.Inspect(ctx, "old-done")
			if err != nil {
				t.Fatal(err)
			}
			archive, err := objstore.New(ctx, f.JS, objstore.Options{Bucket: client.ArchiveBucket})
			if err != nil {
				t.Fatal(err)
			}
			sch, err := scheduler.New(scheduler.Config{Client: f.Client, Retention: 30 * 24 * time.Hour, Archive: archive})
			if err != nil {
				t.Fatal(err)
			}
			if res := sch.Purge(ctx); res.Purged != 1 || sch.Stats().Archived != 1 {
				t.Fatalf("purge = %+v, archived %d; want old-done purged and archived", res, sch.Stats().Archived)
			}
			if _, err := f.Store.GetRun(ctx, "old-done"); !errors.Is(err, checkpoint.ErrPurged) {
				t.Fatalf("old-done after the purge: %v, want purged", err)
			}
			// A client that was never told of the archive finds the bucket.
			for name, cl := range map[string]*client.Client{"default bucket": client.New(f.JS, f.Store), "WithArchive": client.New(nil, f.Store, client.WithArchive(archive))} {
				v, err := cl.Inspect(ctx, "old-done")
				if err != nil {
					t.Fatalf("%s: inspect the archived run: %v", name, err)
				}
				a := v.Archived
				if a == nil || a.Bucket != client.ArchiveBucket || a.Object != "old-done.json.gz" || a.Bytes <= 0 || a.Purged == nil || !a.Purged.EndedAt.Equal(old) {
					t.Fatalf("%s: archived = %+v, want the bucket, object, size and the tombstone (ended %s)", name, a, old)
				}
				if v.Status != checkpoint.StatusCompleted || len(v.Checkpoints) != 2 || string(v.State) != `{"paid":true}` || string(v.Input) != `{"claim":42}` {
					t.Errorf("%s: archived view: status %s, %d checkpoints, state %s, input %s; want it as it was", name, v.Status, len(v.Checkpoints), v.State, v.Input)
				}
				v.Archived = nil
				if got, want := mustJSON(t, v), mustJSON(t, before); got != want {
					t.Errorf("%s: the archived view differs from the view before the purge:\n got %s\nwant %s", name, got, want)
				}
			}
			if _, err := f.Client.Inspect(ctx, "never-was"); !errors.Is(err, client.ErrNotFound) {
				t.Errorf("inspect of an unknown run: %v, want ErrNotFound", err)
			}

			var stored, archived []string
			n, err := f.Client.Export(ctx, client.ExportQuery{EndedBefore: time.Now()}, func(v client.RunView) error {
				stored = append(stored, v.RunID)
				return nil
			})
			if err != nil || n != 1 || len(stored) != 1 || stored[0] != "fresh-done" {
				t.Errorf("export of the stored ended runs: %v (%d), %v; want fresh-done", stored, n, err)
			}
			n, err = f.Client.Export(ctx, client.ExportQuery{EndedBefore: time.Now().Add(-48 * time.Hour)}, func(v client.RunView) error {
				t.Errorf("exported %s, which ended after --ended-before", v.RunID)
				return nil
			})
			if err != nil || n != 0 {
				t.Errorf("export before 48h ago: %d, %v; want none", n, err)
			}
			n, err = client.ExportArchived(ctx, archive, client.ExportQuery{EndedBefore: time.Now()}, func(v client.RunView) error {
				archived = append(archived, v.RunID)
				return nil
			})
			if err != nil || n != 1 || len(archived) != 1 || archived[0] != "old-done" {
				t.Errorf("export of the archive: %v (%d), %v; want old-done", archived, n, err)
			}
			if _, err := f.Client.Export(ctx, client.ExportQuery{EndedBefore: time.Now(), Status: checkpoint.StatusWaiting}, nil); !errors.Is(err, client.ErrBadFilter) {
				t.Errorf("export of waiting runs: %v, want ErrBadFilter", err)
			}
		})
	}
}

// A run whose archive cannot be written is not purged.
func TestRunNotPurgedWhenItsArchiveFails(t *testing.T) {
	for _, kind := range retentionKinds(t) {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			ctx := context.Background()
			archiveFixture(t, f)
			sch, err := scheduler.New(scheduler.Config{Client: f.Client, Retention: 30 * 24 * time.Hour, Archive: failingArchive{blob.NewMemory("a")}})
			if err != nil {
				t.Fatal(err)
			}
			if res := sch.Purge(ctx); res.Purged != 0 || sch.Stats().Archived != 0 || sch.Stats().Errors == 0 {
				t.Fatalf("purge = %+v, stats %+v; want nothing purged and an error counted", res, sch.Stats())
			}
			if run, err := f.Store.GetRun(ctx, "old-done"); err != nil || run.Status != checkpoint.StatusCompleted {
				t.Fatalf("old-done after a failed archive: %v, %v; want it kept", run.Status, err)
			}
		})
	}
}

// Archiving a run again replaces its archive: an id freed when its
// tombstone expired may be archived by its next run.
func TestArchiveReplacesAnEarlierArchive(t *testing.T) {
	f := testfleet.New(t, "redis")
	ctx := context.Background()
	archiveFixture(t, f)
	archive := blob.NewMemory("a")
	if _, err := archive.Put(ctx, client.ArchiveObject("old-done"), []byte("an older run's archive")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Client.Archive(ctx, archive, "old-done"); err != nil {
		t.Fatal(err)
	}
	v, err := client.ReadArchive(ctx, archive, "old-done")
	if err != nil || v.RunID != "old-done" || len(v.Checkpoints) != 2 {
		t.Fatalf("read the archive: %s with %d checkpoints, %v; want old-done's", v.RunID, len(v.Checkpoints), err)
	}
	if _, err := client.ReadArchive(ctx, archive, "fresh-done"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("read an archive never written: %v, want ErrNotFound", err)
	}
}

type failingArchive struct{ *blob.Memory }

func (failingArchive) Put(context.Context, string, []byte) (blob.Ref, error) {
	return blob.Ref{}, errors.New("object store unavailable")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
