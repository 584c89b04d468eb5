package kvstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// This store has no run index yet: PageRuns and CountRuns read every run
// (ListRuns's scan), as listings did before the index. They cost what the
// bucket holds, not the page; the index comes in a later change.

// PageRuns reads every run matching q and returns the page q asks for:
// newest first, by creation, or, with a status, by the run's last update
// (when an ended run ended).
func (s *Store) PageRuns(ctx context.Context, q checkpoint.PageQuery) (checkpoint.RunPage, error) {
	if err := q.Validate(); err != nil {
		return checkpoint.RunPage{}, fmt.Errorf("page runs: %w", err)
	}
	limit := q.Limit
	if limit == 0 {
		limit = checkpoint.DefaultPageLimit
	}
	runs, err := s.ListRuns(ctx, checkpoint.Filter{Status: q.Status, Workflow: q.Workflow})
	if err != nil {
		return checkpoint.RunPage{}, fmt.Errorf("page runs: %w", err)
	}
	key := func(r checkpoint.Run) checkpoint.RunKey {
		at := r.CreatedAt
		if q.Status != "" {
			at = r.UpdatedAt
		}
		return checkpoint.RunKey{At: at.Truncate(time.Millisecond), ID: r.ID}
	}
	newest := func(a, b checkpoint.RunKey) int {
		if c := b.At.Compare(a.At); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	}
	slices.SortFunc(runs, func(a, b checkpoint.Run) int { return newest(key(a), key(b)) })
	var page checkpoint.RunPage
	for _, r := range runs {
		if !q.After.IsZero() && newest(q.After, key(r)) >= 0 {
			continue
		}
		if len(page.Runs) == limit {
			page.Next = key(page.Runs[limit-1])
			break
		}
		page.Runs = append(page.Runs, r)
	}
	return page, nil
}

// CountRuns reads every run and counts them.
func (s *Store) CountRuns(ctx context.Context) (checkpoint.RunCounts, error) {
	runs, err := s.ListRuns(ctx, checkpoint.Filter{})
	if err != nil {
		return checkpoint.RunCounts{}, fmt.Errorf("count runs: %w", err)
	}
	counts := checkpoint.RunCounts{Status: map[checkpoint.Status]int64{}, Workflow: map[string]map[checkpoint.Status]int64{}}
	for _, r := range runs {
		counts.Status[r.Status]++
		if counts.Workflow[r.Workflow] == nil {
			counts.Workflow[r.Workflow] = map[checkpoint.Status]int64{}
		}
		counts.Workflow[r.Workflow][r.Status]++
	}
	return counts, nil
}
