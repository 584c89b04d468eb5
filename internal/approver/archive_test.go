package approver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/scheduler"
)

// GET /api/runs/{id} of a purged run answers 404 naming its tombstone,
// and of an archived one 200 with the archived view, marked so.
func TestRunsAPIPurgedAndArchived(t *testing.T) {
	if testing.Short() {
		t.Skip("needs nats-server and redis-server")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind, nil)
			ctx := context.Background()
			old := time.Now().UTC().Add(-40 * 24 * time.Hour)
			for _, id := range []string{"gone-1", "archived-1"} {
				if _, err := h.store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Step: 1, Status: checkpoint.StatusCompleted, CreatedAt: old, UpdatedAt: old}); err != nil {
					t.Fatal(err)
				}
			}
			purge := func(cfg scheduler.Config) {
				t.Helper()
				cfg.Client, cfg.Retention = h.client, 30*24*time.Hour
				sch, err := scheduler.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if res := sch.Purge(ctx); res.Purged != 1 {
					t.Fatalf("purge = %+v, want one run", res)
				}
			}
			// gone-1 is purged without an archive, archived-1 by the
			// scheduler with one.
			if err := h.store.(checkpoint.Retention).Purge(ctx, h.run("gone-1"), time.Hour); err != nil {
				t.Fatal(err)
			}
			archive, err := objstore.New(ctx, h.js, objstore.Options{Bucket: client.ArchiveBucket})
			if err != nil {
				t.Fatal(err)
			}
			purge(scheduler.Config{Archive: archive})

			code, _, body := h.do(http.MethodGet, "/api/runs/gone-1", h.tokens["ops"], "", nil)
			if code != http.StatusNotFound || !strings.Contains(string(body), "was purged at") {
				t.Errorf("GET a purged run: %d %s; want 404 naming the purge", code, body)
			}
			code, _, body = h.do(http.MethodGet, "/api/runs/archived-1", h.tokens["ops"], "", nil)
			var v client.RunView
			if err := json.Unmarshal(body, &v); code != http.StatusOK || err != nil || v.RunID != "archived-1" || v.Archived == nil || v.Archived.Purged == nil {
				t.Errorf("GET an archived run: %d %s; want 200 with the archived view", code, body)
			}
		})
	}
}
