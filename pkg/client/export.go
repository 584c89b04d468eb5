package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// ExportQuery selects the ended runs Export writes.
type ExportQuery struct {
	// EndedBefore: runs that ended before this time. Required.
	EndedBefore time.Time
	// EndedAfter, when set: runs that ended at or after it (an
	// incremental export starts where the last one ended).
	EndedAfter time.Time
	// Status: one ended status (completed, failed, cancelled, dead);
	// empty exports all four.
	Status checkpoint.Status
	// Workflow: runs of this workflow; empty exports every workflow.
	Workflow string
}

func (q ExportQuery) validate() error {
	if q.EndedBefore.IsZero() {
		return fmt.Errorf("%w: export: EndedBefore is required", ErrBadFilter)
	}
	if !q.EndedAfter.IsZero() && !q.EndedAfter.Before(q.EndedBefore) {
		return fmt.Errorf("%w: export: ended after %s is not before %s", ErrBadFilter, q.EndedAfter.Format(time.RFC3339), q.EndedBefore.Format(time.RFC3339))
	}
	if q.Status != "" && !q.Status.Terminal() {
		return fmt.Errorf("%w: export: status %q: want one of %s", ErrBadFilter, q.Status, strings.Join(endedStatuses(), ", "))
	}
	if q.Workflow != "" && !checkpoint.ValidID(q.Workflow) {
		return fmt.Errorf("%w: export: workflow %q: not a workflow name", ErrBadFilter, q.Workflow)
	}
	return nil
}

func (q ExportQuery) statuses() []checkpoint.Status {
	if q.Status != "" {
		return []checkpoint.Status{q.Status}
	}
	return []checkpoint.Status{checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead}
}

// keeps says whether q selects v: by its status and workflow, and by when
// it ended (its last update) when byTime (the store's index of a status
// already says when the run took it).
func (q ExportQuery) keeps(v RunView, byTime bool) bool {
	ended := v.UpdatedAt
	return v.Status.Terminal() && (q.Status == "" || v.Status == q.Status) && (q.Workflow == "" || v.Workflow == q.Workflow) &&
		(!byTime || ended.Before(q.EndedBefore) && !ended.Before(q.EndedAfter))
}

func endedStatuses() []string {
	var out []string
	for _, st := range checkpoint.Statuses() {
		if st.Terminal() {
			out = append(out, string(st))
		}
	}
	return out
}

// exportPage is how many runs Export reads from the index at once, and
// exportParallel how many of them it inspects at once.
const (
	exportPage     = 200
	exportParallel = 16
)

// Export calls emit with the view (as Inspect gives it) of every stored
// run q selects: for each ended status, the runs that took it before
// q.EndedBefore, newest first, read from the store's index of that status
// page by page, so an export costs what it returns, not what the store
// holds. It stops at the first error of emit. It returns how many runs it
// emitted. Runs already purged are not in the store: ExportArchived reads
// those the archive kept.
func (c *Client) Export(ctx context.Context, q ExportQuery, emit func(RunView) error) (int, error) {
	if err := q.validate(); err != nil {
		return 0, err
	}
	n := 0
	for _, st := range q.statuses() {
		// The cursor of a run that took the status at EndedBefore's
		// millisecond with the least id there is ("-" sorts before every
		// other id): the listing goes on with the runs that took it before.
		after := checkpoint.Cursor{At: q.EndedBefore.Truncate(time.Millisecond), ID: "-"}
		for {
			page, err := c.store.PageRuns(ctx, checkpoint.PageQuery{Status: st, Workflow: q.Workflow, Limit: exportPage, After: after})
			if err != nil {
				return n, fmt.Errorf("export %s runs: %w", st, err)
			}
			runs, done := page.Runs, page.Next.IsZero()
			if !q.EndedAfter.IsZero() {
				for i, r := range runs {
					if r.UpdatedAt.Before(q.EndedAfter) {
						runs, done = runs[:i], true
						break
					}
				}
			}
			views, err := c.inspectAll(ctx, runs)
			if err != nil {
				return n, err
			}
			for _, v := range views {
				if !q.keeps(v, false) { // changed since the index was read: redriven
					continue
				}
				if err := emit(v); err != nil {
					return n, err
				}
				n++
			}
			if done {
				break
			}
			after = page.Next
		}
	}
	return n, nil
}

// inspectAll inspects runs, exportParallel at a time, in order; a run
// purged meanwhile is left out.
func (c *Client) inspectAll(ctx context.Context, runs []checkpoint.Run) ([]RunView, error) {
	views := make([]RunView, len(runs))
	errs := make([]error, len(runs))
	sem := make(chan struct{}, exportParallel)
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			views[i], errs[i] = c.inspectStored(ctx, r.ID)
		}()
	}
	wg.Wait()
	out := views[:0]
	for i, v := range views {
		switch {
		case errors.Is(errs[i], ErrNotFound):
		case errs[i] != nil:
			return nil, errs[i]
		default:
			out = append(out, v)
		}
	}
	return out, nil
}

// inspectStored is Inspect of a run the store holds; ErrNotFound when it
// does not (no look in the archive).
func (c *Client) inspectStored(ctx context.Context, id string) (RunView, error) {
	v, err := c.Inspect(ctx, id)
	if err == nil && v.Archived != nil {
		return RunView{}, fmt.Errorf("run %s: purged: %w", id, ErrNotFound)
	}
	return v, err
}

// ExportArchived calls emit with every run in archive that q selects. The
// Object Store has no index by time: it reads the description of every
// archived run, and the document of each whose modification (its
// archiving) is after q.EndedAfter, so it costs what the archive holds.
func ExportArchived(ctx context.Context, archive blob.Store, q ExportQuery, emit func(RunView) error) (int, error) {
	if err := q.validate(); err != nil {
		return 0, err
	}
	objs, err := archive.List(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("export the archive: %w", err)
	}
	n := 0
	for _, o := range objs {
		id, ok := strings.CutSuffix(o.Name, ".json.gz")
		if !ok || !checkpoint.ValidID(id) || o.ModTime.Before(q.EndedAfter) { // archived after it ended
			continue
		}
		v, err := ReadArchive(ctx, archive, id)
		if errors.Is(err, ErrNotFound) {
			continue // replaced or expired meanwhile
		}
		if err != nil {
			return n, err
		}
		if !q.keeps(v, true) {
			continue
		}
		if err := emit(v); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
