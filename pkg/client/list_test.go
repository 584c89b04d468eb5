package client_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// pageCounter is the real store, counting the runs its pages return.
type pageCounter struct {
	checkpoint.Store
	read atomic.Int64
}

func (p *pageCounter) PageRuns(ctx context.Context, q checkpoint.PageQuery) (checkpoint.RunPage, error) {
	page, err := p.Store.PageRuns(ctx, q)
	p.read.Add(int64(len(page.Runs)))
	return page, err
}

// A listing of the runs newer than an age stops at the first older one:
// it reads the new runs and a page, not the history behind them.
func TestListPageNewerThanStopsAtTheAge(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			ctx := context.Background()
			now := time.Now().UTC()
			for i := range 300 {
				at := now.Add(-48*time.Hour - time.Duration(i)*time.Second)
				if _, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprintf("old-%03d", i), Workflow: "w", Status: checkpoint.StatusCompleted, CreatedAt: at, UpdatedAt: at}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 5 {
				at := now.Add(-time.Duration(i) * time.Minute)
				if _, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: fmt.Sprintf("new-%d", i), Workflow: "w", Status: checkpoint.StatusCompleted, CreatedAt: at, UpdatedAt: at}); err != nil {
					t.Fatal(err)
				}
			}
			store := &pageCounter{Store: f.Store}
			cl := client.New(f.JS, store)
			page, err := cl.ListPage(ctx, client.ListFilter{NewerThan: time.Hour, Now: now}, 10, checkpoint.Cursor{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Runs) != 5 || !page.Next.IsZero() {
				t.Errorf("ListPage(newer than 1h) = %d runs, next %v; want the 5 new ones and no next page", len(page.Runs), page.Next)
			}
			if n := store.read.Load(); n > 20 {
				t.Errorf("the listing read %d runs, want about one page: it went on past the age", n)
			}
		})
	}
}
