package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/service"
	"github.com/nats-io/nats.go/jetstream"
)

// checkArchiveRights shows, on deploy/nats/nats-server.conf's users, that
// the scheduler (sjs) may create the archive and archive run id twice
// (the second replaces the first), and that the approver (ajs) reads it
// back, as GET /api/runs/{id} of a purged run does.
func checkArchiveRights(t *testing.T, ctx context.Context, sjs, ajs jetstream.JetStream, id string) {
	t.Helper()
	sstore, err := kvstore.New(ctx, sjs, kvstore.Options{Bucket: "durable"})
	if err != nil {
		t.Fatalf("scheduler opens the checkpoint bucket: %v", err)
	}
	archive, err := objstore.New(ctx, sjs, objstore.Options{Bucket: client.ArchiveBucket})
	if err != nil {
		t.Fatalf("scheduler creates the archive: %v", err)
	}
	for range 2 {
		if _, err := client.New(sjs, sstore).Archive(ctx, archive, id); err != nil {
			t.Fatalf("scheduler archives %s: %v", id, err)
		}
	}
	aarchive, err := objstore.New(ctx, ajs, objstore.Options{Bucket: client.ArchiveBucket, NoCreate: true})
	if err != nil {
		t.Fatalf("approver binds the archive: %v", err)
	}
	if v, err := client.ReadArchive(ctx, aarchive, id); err != nil || v.RunID != id {
		t.Fatalf("approver reads the archive of %s: %v", id, err)
	}
}

// `durable runs show` of a run that retention purged after archiving it
// prints the archived run and says so; `durable runs export` writes the
// stored ended runs, and with --archived the archived ones, as JSON lines.
func TestRunsShowArchivedAndExport(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		now := time.Now().UTC()
		old, recent := now.Add(-40*24*time.Hour), now.Add(-2*24*time.Hour)
		for id, at := range map[string]time.Time{"arch-old": old, "arch-recent": recent} {
			run, err := e.store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Step: 1, StepName: "intake",
				Status: checkpoint.StatusRunning, Input: json.RawMessage(`{"claim_id":"` + id + `"}`), CreatedAt: at, UpdatedAt: at})
			if err != nil {
				t.Fatal(err)
			}
			run.Status, run.UpdatedAt = checkpoint.StatusCompleted, at
			if _, err := e.store.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, Name: "intake", State: json.RawMessage(`{"ok":true}`), At: at, Attempt: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// The scheduler as `durable scheduler --archive` builds it.
		conn := service.Conn{NATSURL: e.natsURL, RedisURL: e.redisURL, KVBucket: "durable"}
		s := &service.Session{JetStream: e.js, Store: e.store}
		archive, err := conn.OpenArchive(ctx, s, 0)
		if err != nil {
			t.Fatal(err)
		}
		sch, err := scheduler.New(scheduler.Config{Client: client.New(e.js, e.store), Retention: 30 * 24 * time.Hour, Archive: archive})
		if err != nil {
			t.Fatal(err)
		}
		if res := sch.Purge(ctx); res.Purged != 1 {
			t.Fatalf("purge = %+v, want arch-old purged", res)
		}

		// The tombstone keeps the id taken: a start of it exits 3 saying
		// the run was purged, and creates nothing.
		if r := e.cli("start", "claim", "--id", "arch-old", "--input", `{"amount": 5}`); r.code != 3 || !strings.Contains(r.stderr, "purged") {
			t.Errorf("start of the purged arch-old: want exit 3 saying it was purged, got %d: %s", r.code, r.stderr)
		}
		if _, err := e.store.GetRun(ctx, "arch-old"); !errors.Is(err, checkpoint.ErrPurged) {
			t.Errorf("after a refused start, arch-old: %v, want still purged", err)
		}
		// A command on it says what its tombstone says, once (issue 25).
		if r := e.mustCLI(3, "runs", "cancel", "arch-old"); !strings.Contains(r.stderr, "and was purged at") || strings.Count(r.stderr, "arch-old") != 1 {
			t.Errorf("runs cancel of the purged arch-old: %q, want its tombstone's words, naming it once", r.stderr)
		}

		out := e.mustCLI(0, "runs", "show", "arch-old").stdout
		for _, want := range []string{"run arch-old  workflow claim", "status completed", "archived ", "this is its archive (DURABLE_ARCHIVE/arch-old.json.gz", ", purged "} {
			if !strings.Contains(out, want) {
				t.Errorf("runs show of an archived run lacks %q:\n%s", want, out)
			}
		}
		v := e.showJSON("arch-old")
		if a, _ := v["archived"].(map[string]any); a["object"] != "arch-old.json.gz" || len(v["checkpoints"].([]any)) != 1 {
			t.Errorf("runs show --json of an archived run: archived %v, checkpoints %v", v["archived"], v["checkpoints"])
		}

		lines := func(r result) []string {
			var ids []string
			for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
				var v client.RunView
				if l == "" {
					continue
				}
				if err := json.Unmarshal([]byte(l), &v); err != nil {
					t.Fatalf("export line %q: %v", l, err)
				}
				ids = append(ids, v.RunID)
			}
			return ids
		}
		if got := lines(e.mustCLI(0, "runs", "export", "--ended-before", "1d")); strings.Join(got, ",") != "arch-recent" {
			t.Errorf("runs export --ended-before 1d: %v, want arch-recent", got)
		}
		if got := lines(e.mustCLI(0, "runs", "export", "--ended-before", "3d")); len(got) != 0 {
			t.Errorf("runs export --ended-before 3d: %v, want none (arch-old is purged)", got)
		}
		r := e.mustCLI(0, "runs", "export", "--ended-before", now.Add(time.Hour).Format(time.RFC3339), "--archived")
		if got := lines(r); len(got) != 2 || !strings.Contains(r.stderr, "2 runs exported") {
			t.Errorf("runs export --archived: %v, stderr %q; want arch-recent and arch-old", got, r.stderr)
		}
		for _, args := range [][]string{
			{"runs", "export"},
			{"runs", "export", "--ended-before", "yesterday"},
			{"runs", "export", "--ended-before", "1d", "--status", "waiting"},
			{"runs", "export", "--ended-before", "3d", "--ended-after", "1d"},
		} {
			if r := e.cli(args...); r.code != 2 || r.stdout != "" {
				t.Errorf("durable %s: %s; want exit 2 and nothing written", strings.Join(args, " "), r)
			}
		}
		if r := e.cli("scheduler", "--archive", "--retention", "0"); r.code != 2 || !strings.Contains(r.stderr, "--archive with --retention 0") {
			t.Errorf("scheduler --archive --retention 0: %s; want exit 2 naming both", r)
		}
	})
}
