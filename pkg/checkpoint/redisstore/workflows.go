package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// RegisterWorkflow records info under "name@version", replacing an earlier
// registration of the same version. UpdatedAt defaults to now.
func (s *Store) RegisterWorkflow(ctx context.Context, info checkpoint.WorkflowInfo) error {
	// Same alphabet as run ids: workflow names are NATS subject tokens too.
	if !checkpoint.ValidID(info.Name) {
		return fmt.Errorf("register workflow %q: name must be 1-128 letters, digits, '-' or '_'", info.Name)
	}
	if info.UpdatedAt.IsZero() {
		info.UpdatedAt = time.Now().UTC()
	}
	doc, err := marshal(info)
	if err != nil {
		return fmt.Errorf("register workflow %s@%d: %w", info.Name, info.Version, err)
	}
	field := info.Name + "@" + strconv.Itoa(info.Version)
	if err := s.rdb.HSet(ctx, s.workflowsKey(), field, doc).Err(); err != nil {
		return fmt.Errorf("register workflow %s: %w", field, err)
	}
	return nil
}

// Workflows lists registered workflows by name, then version.
func (s *Store) Workflows(ctx context.Context) ([]checkpoint.WorkflowInfo, error) {
	all, err := s.rdb.HGetAll(ctx, s.workflowsKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	out := make([]checkpoint.WorkflowInfo, 0, len(all))
	for field, doc := range all {
		var info checkpoint.WorkflowInfo
		if err := unmarshal(doc, &info); err != nil {
			return nil, fmt.Errorf("list workflows: %s: %w", field, err)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}
