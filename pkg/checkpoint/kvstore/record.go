package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

// storedRun is a run record as the bucket holds it: the run's JSON and,
// beside its fields, what it says of its index entries. Readers of an
// older version ignore "_ix" and, writing the record, drop it: such a
// record reads as one from before the index.
type storedRun struct {
	checkpoint.Run
	Index *ixState `json:"_ix,omitempty"`
}

func encodeRun(run checkpoint.Run, ix *ixState) ([]byte, error) {
	return marshal(storedRun{Run: run, Index: ix})
}

// decodeStored reads the record of run id stored at rev; a tombstone
// (purge.go) is a *checkpoint.PurgedError, which is ErrNotFound too.
func decodeStored(id string, value []byte, rev uint64) (checkpoint.Run, *ixState, error) {
	if isTomb(value) {
		return checkpoint.Run{}, nil, tombError(id, value)
	}
	var doc storedRun
	if err := unmarshal(value, &doc); err != nil {
		return checkpoint.Run{}, nil, err
	}
	doc.Run.Rev = rev
	return doc.Run, doc.Index, nil
}

// base is what a write of a run needs of the record it replaces: the
// status and index entries it drops.
type base struct {
	rev      uint64
	status   checkpoint.Status
	workflow string
	created  time.Time
	updated  time.Time
	// ix is nil for a record from before the index.
	ix *ixState
}

func baseOf(run checkpoint.Run, ix *ixState) *base {
	return &base{rev: run.Rev, status: run.Status, workflow: run.Workflow, created: run.CreatedAt, updated: run.UpdatedAt, ix: ix}
}

// loadBase returns the record run id holds at revision rev: from the
// cache when it holds that revision (the worker's Load read it a moment
// ago), else read. b is the stored record and ok false when it is at
// another revision; b is nil when there is no run.
func (s *Store) loadBase(ctx context.Context, id string, rev uint64) (b *base, ok bool, err error) {
	if b := s.runs.get(id); b != nil && b.rev == rev {
		return b, true, nil
	}
	e, err := s.get(ctx, runKey(id))
	if err != nil || !e.found {
		return nil, false, err
	}
	run, ix, err := decodeStored(id, e.value, e.rev)
	if err != nil {
		return nil, false, err
	}
	b = baseOf(run, ix)
	s.runs.put(id, b)
	return b, b.rev == rev, nil
}

// runCache keeps the newest base this process read or wrote of each run,
// so that a commit needs no read of the record its Load read. A revision
// is a record's stream sequence: what the cache says of it never goes
// stale, only the revision may be an old one.
type runCache struct {
	mu   sync.Mutex
	runs map[string]*base
}

const runCacheSize = 1 << 14

func (c *runCache) get(id string) *base {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

func (c *runCache) put(id string, b *base) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.runs[id]; old != nil && old.rev > b.rev {
		return
	}
	if c.runs == nil || len(c.runs) >= runCacheSize {
		c.runs = map[string]*base{}
	}
	c.runs[id] = b
}

// forget drops what the cache holds of run id (purged).
func (c *runCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.runs, id)
}

// writeRun writes next over the record b, compare-and-set on b.rev (b
// nil: creates the run), in the order that keeps a live run in its
// listing whatever happens between the writes: w's entries first, then
// the record, then the markers of the entries the record no longer
// names, without waiting for their answers. A refused record write
// (errWrongRevision) removes the entries
// it stored, which only it names; a crash leaves them, and a stale
// entry left in a listing, to its readers (see resolve).
func (s *Store) writeRun(ctx context.Context, b *base, next checkpoint.Run, w ixWrite) (checkpoint.Run, error) {
	doc, err := encodeRun(next, w.ix)
	if err != nil {
		return checkpoint.Run{}, err
	}
	for _, keys := range [][]string{w.puts, w.late} { // late after the entries
		if len(keys) > 0 {
			if err := s.putIndex(ctx, keys); err != nil {
				return checkpoint.Run{}, fmt.Errorf("index run %s: %w", next.ID, err)
			}
		}
	}
	if s.afterIndex != nil {
		s.afterIndex(ctx)
	}
	var rev uint64
	if b == nil {
		rev, err = s.create(ctx, runKey(next.ID), doc)
	} else {
		rev, err = s.put(ctx, runKey(next.ID), doc, b.rev)
	}
	if errors.Is(err, errWrongRevision) && len(w.own) > 0 {
		_ = s.dropIndex(ctx, w.own)
	}
	if err != nil {
		return checkpoint.Run{}, err
	}
	stored := s.wroteRun(next, rev, w)
	if s.afterRecord != nil {
		s.afterRecord(ctx)
	}
	// The record is written: the markers go without waiting for their
	// answers. An entry a lost one leaves is a stale one, which its
	// readers remove.
	for _, k := range w.drops {
		_ = s.nc.PublishMsg(s.markerMsg(k, 0))
	}
	return stored, nil
}

// batchRun writes next over the record b, expecting its key at revision
// expect (0: no message at all), in one atomic batch with w's index
// messages: all land or none. A refused expectation wraps
// errWrongRevision.
func (s *Store) batchRun(ctx context.Context, b *base, expect uint64, next checkpoint.Run, w ixWrite) (checkpoint.Run, error) {
	doc, err := encodeRun(next, w.ix)
	if err != nil {
		return checkpoint.Run{}, err
	}
	msgs := append(s.indexMsgs(w), s.putMsg(runKey(next.ID), doc, expect))
	seq, apiErr, err := s.sendBatch(ctx, msgs)
	if err != nil {
		return checkpoint.Run{}, err
	}
	if apiErr == errNotBatched {
		apiErr = nil // each message was stored with its own check: it held
	}
	if apiErr != nil {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return checkpoint.Run{}, fmt.Errorf("write %s at revision %d: %w: %w", runKey(next.ID), expect, errWrongRevision, apiErr)
		case codeAtomicDisabled:
			s.batches.Store(false)
			return s.writeRun(ctx, b, next, w)
		}
		return checkpoint.Run{}, apiErr
	}
	return s.wroteRun(next, seq, w), nil
}
