package fleetcheck

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Index checks the store's run index against the run records of ids, the
// only runs in the store: each run, read by id, must be listed under its
// status and nowhere else, every page of every status listing must hold
// these runs only, and CountRuns must say what the records say. It
// returns the disagreements, none when the index is right.
func Index(ctx context.Context, store checkpoint.Runs, ids []string) ([]string, error) {
	truth := map[checkpoint.Status][]string{}
	for _, id := range ids {
		run, err := store.GetRun(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("index check: read %s: %w", id, err)
		}
		truth[run.Status] = append(truth[run.Status], id)
	}
	counts, err := store.CountRuns(ctx)
	if err != nil {
		return nil, fmt.Errorf("index check: %w", err)
	}
	var problems []string
	for _, st := range checkpoint.Statuses() {
		want := truth[st]
		slices.Sort(want)
		listed, err := store.ListRuns(ctx, checkpoint.Filter{Status: st})
		if err != nil {
			return nil, fmt.Errorf("index check: list %s: %w", st, err)
		}
		var got []string
		for _, r := range listed {
			got = append(got, r.ID)
			if r.Status != st {
				problems = append(problems, fmt.Sprintf("the %s listing holds %s, which is %s", st, r.ID, r.Status))
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("the %s listing holds [%s], the records say [%s]", st, strings.Join(got, " "), strings.Join(want, " ")))
		}
		if n := counts.Status[st]; n != int64(len(want)) {
			problems = append(problems, fmt.Sprintf("CountRuns says %d %s runs, the records say %d", n, st, len(want)))
		}
	}
	return problems, nil
}
