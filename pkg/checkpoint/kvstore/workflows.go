package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
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
//
// It is called on every run start, so the list is cached: one request
// reads the sequence of the bucket's newest workflow message, and only
// when that moved (a registration, here or in another process) is the
// list read again. The answer is as fresh as an uncached read.
func (s *Store) Workflows(ctx context.Context) ([]checkpoint.WorkflowInfo, error) {
	seq, err := s.lastSeq(ctx, "wf.>")
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	if out, ok := s.workflows.get(seq); ok {
		return out, nil
	}
	out := []checkpoint.WorkflowInfo{}
	err = s.scan(ctx, "wf.>", func(e jetstream.KeyValueEntry) error {
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
	// The scan saw at least everything up to seq; a later registration
	// moves the newest sequence past it and the next call reads again.
	s.workflows.put(seq, out)
	return slices.Clone(out), nil
}

// workflowCache is the last workflow list read, with the sequence of the
// newest workflow message when it was read.
type workflowCache struct {
	mu    sync.Mutex
	valid bool
	seq   uint64
	list  []checkpoint.WorkflowInfo
}

func (c *workflowCache) get(seq uint64) ([]checkpoint.WorkflowInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid || c.seq != seq {
		return nil, false
	}
	return slices.Clone(c.list), true
}

func (c *workflowCache) put(seq uint64, list []checkpoint.WorkflowInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.valid, c.seq, c.list = true, seq, slices.Clone(list)
}

// lastSeq returns the stream sequence of the newest message on any key
// matching filter (a delete marker included), 0 when there is none. The
// KV API has no such read; STREAM.MSG.GET answers it for a wildcard.
func (s *Store) lastSeq(ctx context.Context, filter string) (uint64, error) {
	return s.msgGetSeq(ctx, map[string]any{"last_by_subj": s.subjects + filter, "no_hdr": true})
}

// msgGetSeq sends req, a STREAM.MSG.GET request, to the stream's leader
// and returns the sequence of the message it answers with, 0 when none
// matches.
func (s *Store) msgGetSeq(ctx context.Context, req any) (uint64, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	rctx, cancel := s.bounded(ctx)
	msg, err := s.nc.RequestWithContext(rctx, s.msgGet, data)
	cancel()
	if err != nil {
		return 0, err
	}
	var reply msgGetReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return 0, fmt.Errorf("decode message get reply: %w", err)
	}
	switch {
	case reply.Error != nil && reply.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, nil
	case reply.Error != nil:
		return 0, reply.Error
	case reply.Message == nil:
		return 0, errors.New("message get reply without a message")
	}
	return reply.Message.Seq, nil
}
