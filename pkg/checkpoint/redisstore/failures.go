package redisstore

import (
	"context"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// RecordFailure counts a failed attempt of step n and keeps its record, in
// one script: INCR of the step's counter, so concurrent calls each get their
// own count, and RPUSH + LTRIM of its capped record list.
func (s *Store) RecordFailure(ctx context.Context, id string, n int, f checkpoint.Failure) (int, error) {
	if err := readID(id); err != nil {
		return 0, fmt.Errorf("record failure: %w", err)
	}
	if n < 1 {
		return 0, fmt.Errorf("record failure %s:%d: steps count from 1", id, n)
	}
	doc, err := marshal(f.Trimmed())
	if err != nil {
		return 0, fmt.Errorf("record failure %s:%d: %w", id, n, err)
	}
	keys := []string{s.runKey(id), s.failuresKey(id, n), s.failureCountKey(id, n)}
	count, err := failureScript.Run(ctx, s.rdb, keys, doc, checkpoint.MaxFailureRecords).Int64()
	if err != nil {
		return 0, fmt.Errorf("record failure %s:%d: %w", id, n, err)
	}
	if count < 0 {
		return 0, fmt.Errorf("record failure %s:%d: %w", id, n, scriptCode(count))
	}
	return int(count), nil
}
