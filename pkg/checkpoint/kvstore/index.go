package kvstore

import (
	"context"
	"errors"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// PageRuns is not implemented yet.
func (s *Store) PageRuns(ctx context.Context, q checkpoint.PageQuery) (checkpoint.RunPage, error) {
	return checkpoint.RunPage{}, errors.ErrUnsupported
}

// CountRuns is not implemented yet.
func (s *Store) CountRuns(ctx context.Context) (checkpoint.RunCounts, error) {
	return checkpoint.RunCounts{}, errors.ErrUnsupported
}
