package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// RecordFailure counts a failed attempt of step n and keeps its record, in
// one script: INCR of the step's counter, so concurrent calls each get their
// own count, and RPUSH + LTRIM of its capped record list.
func (s *Store) RecordFailure(ctx context.Context, id string, n int, f checkpoint.Failure) (int, error) {
	return s.recordFailure(ctx, id, n, 0, f)
}

// RecordBranchFailure counts a failed attempt of branch i of the fan-out
// whose join is step n, as RecordFailure does for a step.
func (s *Store) RecordBranchFailure(ctx context.Context, id string, n, i int, f checkpoint.Failure) (int, error) {
	if i < 1 {
		return 0, fmt.Errorf("record failure %s:%d.%d: branches count from 1", id, n, i)
	}
	return s.recordFailure(ctx, id, n, i, f)
}

func (s *Store) recordFailure(ctx context.Context, id string, n, i int, f checkpoint.Failure) (int, error) {
	if err := readID(id); err != nil {
		return 0, fmt.Errorf("record failure: %w", err)
	}
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("record failure %s:%s: %w", id, stepLabel(n, i), err)
	}
	if n < 1 {
		return fail(errors.New("steps count from 1"))
	}
	doc, err := marshal(f.Trimmed())
	if err != nil {
		return fail(err)
	}
	k := s.stepKeys(id, n, i)
	count, err := failureScript.Run(ctx, s.rdb, []string{k.run, k.failures, k.failureCount}, doc, checkpoint.MaxFailureRecords).Int64()
	if err != nil {
		return fail(err)
	}
	if count < 0 {
		return fail(scriptCode(count))
	}
	return int(count), nil
}
