package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// checkIndex compares the run index with the run records after the
// chaos: every record, found by a SCAN of the run hashes (not through the
// index), must be listed under its status and nowhere else, and the
// counters must equal what the records say.
func checkIndex(ctx context.Context, e *env) ([]string, error) {
	opt, err := redis.ParseURL(e.redis.URL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	truth := map[checkpoint.Status][]string{}
	iter := rdb.Scan(ctx, 0, "durable:{*}:run", 1000).Iterator()
	for iter.Next(ctx) {
		doc, err := rdb.HGet(ctx, iter.Val(), "doc").Result()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", iter.Val(), err)
		}
		var run checkpoint.Run
		if err := json.Unmarshal([]byte(doc), &run); err != nil {
			return nil, fmt.Errorf("decode %s: %w", iter.Val(), err)
		}
		truth[run.Status] = append(truth[run.Status], run.ID)
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	counts, err := e.store.CountRuns(ctx)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, st := range checkpoint.Statuses() {
		want := truth[st]
		slices.Sort(want)
		listed, err := e.store.ListRuns(ctx, checkpoint.Filter{Status: st})
		if err != nil {
			return nil, err
		}
		var got []string
		for _, r := range listed {
			got = append(got, r.ID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("index lists %d %s runs, the records say %d", len(got), st, len(want)))
		}
		if counts.Status[st] != int64(len(want)) {
			problems = append(problems, fmt.Sprintf("counter of %s runs is %d, the records say %d", st, counts.Status[st], len(want)))
		}
	}
	return problems, nil
}
