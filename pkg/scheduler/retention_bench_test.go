package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/scheduler"
)

// BenchmarkPurge purges b.N ended runs of one step each (a checkpoint, a
// journal) with one scheduler at an unbounded rate, and reports runs
// purged a second: the issue asks for 5,000 or more per scheduler. The
// "archived" cases purge with --archive: each run is inspected and
// written to the Object Store bucket first.
//
//	go test ./pkg/scheduler -run NONE -bench Purge -benchtime 20000x
func BenchmarkPurge(b *testing.B) {
	for _, kind := range testfleet.Kinds {
		for _, archived := range []bool{false, true} {
			name := kind
			if archived {
				name += "-archived"
			}
			b.Run(name, func(b *testing.B) { benchPurge(b, kind, archived) })
		}
	}
}

func benchPurge(b *testing.B, kind string, archived bool) {
	f := testfleet.New(b, kind)
	if _, ok := f.Store.(checkpoint.Retention); !ok {
		b.Skipf("store %s does not offer retention yet", kind)
	}
	ctx := context.Background()
	fillEnded(b, f, b.N)
	cfg := scheduler.Config{Client: f.Client, Retention: 30 * 24 * time.Hour, PurgeRate: 1 << 30, PurgeShare: 1}
	if archived {
		archive, err := objstore.New(ctx, f.JS, objstore.Options{Bucket: client.ArchiveBucket})
		if err != nil {
			b.Fatal(err)
		}
		cfg.Archive = archive
	}
	sch, err := scheduler.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	began := time.Now()
	res := sch.Purge(ctx)
	took := time.Since(began)
	b.StopTimer()
	if res.Purged != b.N || archived && sch.Stats().Archived != int64(b.N) {
		b.Fatalf("purged %d, archived %d of %d: %+v", res.Purged, sch.Stats().Archived, b.N, res)
	}
	b.ReportMetric(float64(res.Purged)/took.Seconds(), "runs/s")
}

// fillEnded stores n runs of one step each (a checkpoint, a journal) that
// ended 40 days ago, 16 at once.
func fillEnded(b *testing.B, f *testfleet.Fleet, n int) {
	ctx := context.Background()
	old := time.Now().Add(-40 * 24 * time.Hour)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				id := fmt.Sprintf("done-%07d", i)
				run, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "w", Step: 1, Status: checkpoint.StatusRunning, CreatedAt: old, UpdatedAt: old})
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := f.Store.RecordCall(ctx, id, 1, checkpoint.CallRecord{Name: "model"}); err != nil {
					b.Error(err)
					return
				}
				run.Status, run.Step = checkpoint.StatusCompleted, 1
				if _, err := f.Store.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, State: []byte(`{"claim":"0042","amount":1840}`)}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
