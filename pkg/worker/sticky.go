package worker

import (
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// A worker that commits step n of a run and publishes step n+1 knows
// exactly what the store holds for the run at that moment: the run record
// its commit wrote, checkpoint n, and nothing yet for step n+1. When the
// first delivery of that very message comes back to the same worker, as
// it usually does, the worker starts step n+1 from what it knows instead
// of reading it back: one round trip and two documents' decoding less per
// step (Temporal calls its version of this sticky execution).
//
// It is the store's state, not the message's, so the protocol holds:
//
//   - The entry is matched by the message's Nats-Msg-Id (<run>:<n+1>) on
//     its first delivery only, within stickyTTL, far inside the stream's
//     dedupe window: the stream holds one message with that id in the
//     window, and a first delivery means nobody ran step n+1 from it, so
//     step n+1 has no checkpoint, no journal and no failures yet.
//   - Anything that changed the run record since (a cancel, an
//     operator's edit) moved its revision, and the commit of step n+1 is a
//     compare-and-set on the revision this worker holds: it loses, and the
//     worker follows the store. A cancel that lands just before the step
//     starts is thus seen at its commit rather than before its body runs,
//     as one that lands just after the load always was.
//   - Redeliveries, replays, resumes and anything past the TTL read the
//     store as before.
const (
	stickyTTL = 2 * time.Second
	// stickyBytes bounds what the entries hold (states and run records);
	// past it a run's next step reads the store.
	stickyBytes = 64 << 20
)

type stickyEntry struct {
	msgID   string
	run     checkpoint.Run
	cp      checkpoint.Checkpoint
	size    int
	expires time.Time
}

// sticky holds what this worker committed last for runs whose next step
// it published, by run id.
type sticky struct {
	mu       sync.Mutex
	m        map[string]stickyEntry
	bytes    int
	maxBytes int
	swept    time.Time
}

func newSticky(maxBytes int) *sticky {
	return &sticky{m: make(map[string]stickyEntry), maxBytes: maxBytes}
}

// put remembers the store's state for run, whose next step is about to be
// published with msgID.
func (s *sticky) put(msgID string, run checkpoint.Run, cp checkpoint.Checkpoint) {
	now := time.Now()
	size := cp.Size() + len(run.Input) + 1024 // the run record's other fields, roughly
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.swept) > stickyTTL || s.bytes+size > s.maxBytes {
		s.sweep(now)
	}
	if s.bytes+size > s.maxBytes {
		return // full of live entries: this run reads the store
	}
	s.remove(run.ID)
	s.m[run.ID] = stickyEntry{msgID: msgID, run: run, cp: cp, size: size, expires: now.Add(stickyTTL)}
	s.bytes += size
}

// sweep forgets expired entries; s.mu is held.
func (s *sticky) sweep(now time.Time) {
	for id, e := range s.m {
		if now.After(e.expires) {
			s.remove(id)
		}
	}
	s.swept = now
}

// remove forgets the entry of runID; s.mu is held.
func (s *sticky) remove(runID string) {
	if e, ok := s.m[runID]; ok {
		s.bytes -= e.size
		delete(s.m, runID)
	}
}

// drop forgets run (its publish failed).
func (s *sticky) drop(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(runID)
}

// take returns the snapshot for the first delivery of the message the
// entry of runID was made for, and forgets the entry.
func (s *sticky) take(runID, msgID string, attempt int) (checkpoint.Snapshot, bool) {
	if attempt != 1 {
		return checkpoint.Snapshot{}, false
	}
	s.mu.Lock()
	e, ok := s.m[runID]
	s.remove(runID)
	s.mu.Unlock()
	if !ok || time.Now().After(e.expires) || msgID != e.msgID {
		return checkpoint.Snapshot{}, false
	}
	cp := e.cp
	return checkpoint.Snapshot{Run: e.run, Previous: &cp}, true
}
