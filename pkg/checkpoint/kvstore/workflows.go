package kvstore

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// RegisterWorkflow records info under wf.<name>.<version>, replacing an
// earlier registration of the same version. UpdatedAt defaults to now.
func (s *Store) RegisterWorkflow(ctx context.Context, info checkpoint.WorkflowInfo) error {
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
	if _, err := s.kv.Put(ctx, workflowKey(info.Name, info.Version), doc); err != nil {
		return fmt.Errorf("register workflow %s@%d: %w", info.Name, info.Version, err)
	}
	return nil
}

// Workflows lists registered workflows by name, then version.
func (s *Store) Workflows(ctx context.Context) ([]checkpoint.WorkflowInfo, error) {
	out := []checkpoint.WorkflowInfo{}
	err := s.scan(ctx, "wf.>", func(e jetstream.KeyValueEntry) error {
		var info checkpoint.WorkflowInfo
		if err := unmarshal(e.Value(), &info); err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		out = append(out, info)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}
