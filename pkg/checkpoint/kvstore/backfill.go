package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
)

var _ checkpoint.IndexBackfill = (*Store)(nil)

// backfillProgress is the value of progressKey: how far the backfill of
// a bucket written before the index has come, in stream sequences of its
// run records.
type backfillProgress struct {
	// Target is the newest run record's sequence when the backfill began:
	// every record written after it was written by a version that indexes.
	Target uint64 `json:"target"`
	// Next is the first sequence not looked at yet.
	Next uint64 `json:"next"`
	Done bool   `json:"done"`
}

// BackfillIndex indexes up to batch run records that have no index
// entries (their record has no "_ix": written by a version before the
// index) and says how far it has come (checkpoint.IndexBackfill).
//
// It walks the run records in stream order, from where the last call
// stopped (run.=ix.b.progress) up to the newest record there was when
// the backfill began; a record written since was written by a version
// that indexes. Indexing a record is the write of an update that keeps
// its status (see plan: every entry, the status taken at its UpdatedAt),
// compare-and-set on the record as read, so a run that a worker or the
// backfill itself indexed meanwhile is indexed once; the rewritten record
// moves past the backfill's target, which no call looks at again. A
// crash loses the batch under way, which the next call looks at again.
//
// Records that a process of the previous version writes after the
// backfill began lose their index entries (that version drops "_ix"):
// upgrade every process first.
func (s *Store) BackfillIndex(ctx context.Context, batch int) (checkpoint.BackfillProgress, error) {
	fail := func(err error) (checkpoint.BackfillProgress, error) {
		return checkpoint.BackfillProgress{}, fmt.Errorf("backfill index: %w", err)
	}
	if batch < 1 {
		return fail(fmt.Errorf("batch %d: look at one run at least", batch))
	}
	if s.directAPI == "" {
		return fail(errors.New("the bucket's stream does not allow direct gets (allow_direct), which the backfill reads with"))
	}
	e, err := s.get(ctx, progressKey)
	if err != nil {
		return fail(err)
	}
	var p backfillProgress
	if e.found {
		if err := unmarshal(e.value, &p); err != nil {
			return fail(fmt.Errorf("%s: %w", progressKey, err))
		}
	}
	if p.Done {
		return s.backfillDone(ctx)
	}
	if p.Target == 0 {
		if p.Target, err = s.lastSeq(ctx, "run.*"); err != nil {
			return fail(err)
		}
		p.Next = 1
	}
	var out checkpoint.BackfillProgress
	msgs, eob, err := s.directRead(ctx, map[string]any{"next_by_subj": s.subjects + "run.*", "seq": p.Next, "batch": batch})
	if err != nil {
		return fail(err)
	}
	for _, m := range msgs {
		if m.seq > p.Target {
			p.Next = m.seq
			break
		}
		if m.marker {
			p.Next = m.seq + 1
			continue
		}
		indexed, err := s.backfillRun(ctx, m)
		if err != nil {
			return fail(err)
		}
		if indexed {
			out.Indexed++
		}
		p.Next = m.seq + 1
	}
	if p.Next > p.Target || len(msgs) == 0 {
		// Nothing up to the target is left, unless this answer came from
		// a replica that lags: ask the leader.
		m, err := s.leaderNext(ctx, "run.*", p.Next)
		if err != nil {
			return fail(err)
		}
		p.Done = m == 0 || m > p.Target
	}
	out.Done = p.Done
	out.Remaining = -1
	if eob != nil && !p.Done {
		out.Remaining = int(headerUint(eob, hdrNumPending))
	}
	if p.Done {
		out.Remaining = 0
	}
	doc, err := marshal(p)
	if err != nil {
		return fail(err)
	}
	if _, err := s.put(ctx, progressKey, doc, anyRevision); err != nil {
		return fail(err)
	}
	return out, nil
}

// backfillRun indexes the record m unless it has index entries already,
// and reports whether it did.
func (s *Store) backfillRun(ctx context.Context, m ixMsg) (bool, error) {
	value, rev := m.value, m.seq
	for range maxSettleRetries {
		if value == nil {
			return false, nil // the run is gone
		}
		run, ix, err := decodeStored(strings.TrimPrefix(m.key, "run."), value, rev)
		if errors.Is(err, checkpoint.ErrPurged) {
			return false, nil // a tombstone: no run to index
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", m.key, err)
		}
		if ix != nil {
			return false, nil
		}
		b := baseOf(run, nil)
		if err := s.spill(ctx, &run); err != nil {
			return false, err
		}
		w := s.plan(b, run)
		if s.batches.Load() {
			_, err = s.batchRun(ctx, b, b.rev, run, w)
		} else {
			_, err = s.writeRun(ctx, b, run, w)
		}
		if !errors.Is(err, errWrongRevision) {
			return err == nil, err
		}
		// Written since: look at it again.
		e, err := s.get(ctx, m.key)
		if err != nil {
			return false, err
		}
		value, rev = nil, e.rev
		if e.found {
			value = e.value
		}
	}
	return false, fmt.Errorf("%s still contended after %d attempts", m.key, maxSettleRetries)
}

// leaderNext returns the sequence of the first message at or after seq
// on a key matching filter, as the stream's leader has it, 0 when there
// is none.
func (s *Store) leaderNext(ctx context.Context, filter string, seq uint64) (uint64, error) {
	return s.msgGetSeq(ctx, map[string]any{"next_by_subj": s.subjects + filter, "seq": seq, "no_hdr": true})
}

// backfillDone is a BackfillIndex call once the backfill is done: the
// index maintenance that is left, the recount of the ended runs (see
// maintainCounts).
func (s *Store) backfillDone(ctx context.Context) (checkpoint.BackfillProgress, error) {
	if err := s.maintainCounts(ctx); err != nil {
		return checkpoint.BackfillProgress{}, fmt.Errorf("backfill index: recount ended runs: %w", err)
	}
	return checkpoint.BackfillProgress{Done: true}, nil
}
