package agent

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// Entry is one message of the conversation as the run keeps it: a
// model.Message whose large tool results live in the blob store.
type Entry struct {
	Role      model.Role       `json:"role"`
	Text      string           `json:"text,omitempty"`
	ToolCalls []model.ToolCall `json:"tool_calls,omitempty"`
	Results   []Result         `json:"tool_results,omitempty"`
}

// Result is a tool call's result as the history keeps it.
type Result struct {
	CallID string `json:"call_id"`
	Tool   string `json:"tool"`
	// Content is the whole result, or its first InlineLimit bytes when
	// Ref holds the whole.
	Content string    `json:"content"`
	Ref     *blob.Ref `json:"ref,omitempty"`
	// Bytes is the length of the whole result.
	Bytes   int  `json:"bytes"`
	IsError bool `json:"is_error,omitempty"`
}

// History is the append-only conversation of a run. The recent entries
// (Tail) are in the run's state; older ones are sealed in blob segments,
// each naming the one before it, and the state keeps the newest (Sealed).
type History struct {
	Sealed *blob.Ref `json:"sealed,omitempty"`
	// SealedEntries counts the entries in the sealed segments.
	SealedEntries int     `json:"sealed_entries,omitempty"`
	Tail          []Entry `json:"tail,omitempty"`
}

// segment is one sealed part of a history.
type segment struct {
	Prev    *blob.Ref `json:"prev,omitempty"`
	Entries []Entry   `json:"entries"`
}

// Len is the number of entries.
func (h History) Len() int { return h.SealedEntries + len(h.Tail) }

// Append adds e at the end.
func (h *History) Append(e Entry) { h.Tail = append(h.Tail, e) }

// seal moves the tail into a blob segment once it encodes to more than
// limit bytes. The segment is named for the step and its content, so a
// retried step that seals the same tail stores nothing new.
func (h *History) seal(ctx context.Context, s *steps.Context, limit int) error {
	tail, err := json.Marshal(h.Tail)
	if err != nil {
		return fmt.Errorf("encode the history: %w", err)
	}
	if len(tail) <= limit {
		return nil
	}
	doc, err := json.Marshal(segment{Prev: h.Sealed, Entries: h.Tail})
	if err != nil {
		return fmt.Errorf("encode a history segment: %w", err)
	}
	ref, err := s.PutBlob(ctx, "history", doc)
	if err != nil {
		return fmt.Errorf("seal the history: %w", err)
	}
	h.Sealed = &ref
	h.SealedEntries += len(h.Tail)
	h.Tail = nil
	return nil
}

// Entries reads the whole history, oldest first, through cache.
func (h *History) Entries(ctx context.Context, s *steps.Context, cache *Cache) ([]Entry, error) {
	var segs [][]Entry
	n := len(h.Tail)
	for ref := h.Sealed; ref != nil; {
		b, err := cache.get(ctx, s, *ref)
		if err != nil {
			return nil, fmt.Errorf("read the history: %w", err)
		}
		var seg segment
		if err := json.Unmarshal(b, &seg); err != nil {
			return nil, fmt.Errorf("read the history segment %s: %w", ref.Name, err)
		}
		segs = append(segs, seg.Entries)
		n += len(seg.Entries)
		ref = seg.Prev
	}
	out := make([]Entry, 0, n)
	for i := len(segs) - 1; i >= 0; i-- {
		out = append(out, segs[i]...)
	}
	return append(out, h.Tail...), nil
}

// Messages is the history as the model reads it. A result held in a blob
// is given whole up to view bytes, cut there with a note saying so.
func (h *History) Messages(ctx context.Context, s *steps.Context, cache *Cache, view int) ([]model.Message, error) {
	entries, err := h.Entries(ctx, s, cache)
	if err != nil {
		return nil, err
	}
	msgs := make([]model.Message, len(entries))
	for i, e := range entries {
		msgs[i] = model.Message{Role: e.Role, Text: e.Text, ToolCalls: e.ToolCalls}
		for _, r := range e.Results {
			content := r.Content
			if r.Ref != nil && len(content) < min(r.Bytes, view) {
				b, err := cache.get(ctx, s, *r.Ref)
				if err != nil {
					return nil, fmt.Errorf("read the result of %s (%s): %w", r.Tool, r.CallID, err)
				}
				content = string(b)
			}
			if len(content) > view {
				content = cut(content, view) + fmt.Sprintf("\n[cut at %d of %d bytes]", view, r.Bytes)
			}
			msgs[i].ToolResults = append(msgs[i].ToolResults, model.ToolResult{CallID: r.CallID, Content: content, IsError: r.IsError})
		}
	}
	return msgs, nil
}

// Cache keeps blobs a worker read recently, by digest: history segments
// and tool results are content-addressed and never change, so a loop does
// not read its whole history from the store on every turn. Safe for
// concurrent use.
type Cache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // of *cached, most recent first
	byKey map[string]*list.Element
}

type cached struct {
	key  string
	data []byte
}

// NewCache holds up to max bytes (0: nothing is cached).
func NewCache(max int) *Cache {
	return &Cache{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

func (c *Cache) get(ctx context.Context, s *steps.Context, ref blob.Ref) ([]byte, error) {
	key := ref.Bucket + "/" + ref.Name + "/" + ref.Digest
	if c != nil {
		c.mu.Lock()
		if el, ok := c.byKey[key]; ok {
			c.order.MoveToFront(el)
			b := el.Value.(*cached).data
			c.mu.Unlock()
			return b, nil
		}
		c.mu.Unlock()
	}
	b, err := s.GetBlob(ctx, ref)
	if err != nil || c == nil || len(b) > c.max/4 {
		return b, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; !ok {
		c.byKey[key] = c.order.PushFront(&cached{key: key, data: b})
		c.size += len(b)
		for c.size > c.max {
			last := c.order.Back()
			v := last.Value.(*cached)
			c.order.Remove(last)
			delete(c.byKey, v.key)
			c.size -= len(v.data)
		}
	}
	return b, nil
}
