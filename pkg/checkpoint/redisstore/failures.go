package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// RecordFailure counts a failed attempt of the step or branch at and
// keeps its record, in one script: INCR of its counter, so concurrent
// calls each get their own count, and RPUSH + LTRIM of its capped record
// list.
func (s *Store) RecordFailure(ctx context.Context, id string, at checkpoint.StepRef, f checkpoint.Failure) (int, error) {
	if at.Branch < 0 {
		return 0, fmt.Errorf("record failure %s:%s: branches count from 1", id, at)
	}
	if err := readID(id); err != nil {
		return 0, fmt.Errorf("record failure: %w", err)
	}
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("record failure %s:%s: %w", id, at, err)
	}
	if at.Step < 1 {
		return fail(errors.New("steps count from 1"))
	}
	doc, err := marshal(f.Trimmed())
	if err != nil {
		return fail(err)
	}
	k := s.stepKeys(id, at.Step, at.Branch)
	count, err := failureScript.Run(ctx, s.rdb, []string{k.run, k.failures, k.failureCount}, doc, checkpoint.MaxFailureRecords).Int64()
	if err != nil {
		return fail(err)
	}
	if count < 0 {
		return fail(scriptCode(count))
	}
	return int(count), nil
}
