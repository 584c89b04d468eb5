package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// maxJournalRetries bounds the compare-and-set loop of RecordCall; each
// lost round means another call of the same step was recorded meanwhile.
const maxJournalRetries = 100

// journalDoc is the value of j.<R>.<n>: call name -> record.
type journalDoc map[string]checkpoint.CallRecord

// RecordCall journals rec in step n first-writer-wins by rec.Name and
// returns the stored record. The step's journal is one key updated by
// compare-and-set; on a lost race it re-reads and, if the name is now
// taken, returns the winner's record.
func (s *Store) RecordCall(ctx context.Context, id string, n int, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	return s.recordCall(ctx, id, n, 0, rec)
}

// RecordBranchCall journals rec in branch i of the fan-out whose join is
// step n (key j.<R>.<n>.<i>), as RecordCall does in a step.
func (s *Store) RecordBranchCall(ctx context.Context, id string, n, i int, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	if i < 1 {
		return checkpoint.CallRecord{}, fmt.Errorf("record call %s:%d.%d %q: branches count from 1", id, n, i, rec.Name)
	}
	return s.recordCall(ctx, id, n, i, rec)
}

func (s *Store) recordCall(ctx context.Context, id string, n, i int, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	if err := readID(id); err != nil {
		return checkpoint.CallRecord{}, fmt.Errorf("record call %q: %w", rec.Name, err)
	}
	fail := func(err error) (checkpoint.CallRecord, error) {
		return checkpoint.CallRecord{}, fmt.Errorf("record call %s:%s %q: %w", id, stepLabel(n, i), rec.Name, err)
	}
	key := branchKey(journalKey(id, n), i)
	for range maxJournalRetries {
		doc, rev, err := s.readJournal(ctx, key)
		if err != nil {
			return fail(err)
		}
		if stored, ok := doc[rec.Name]; ok {
			return stored, nil
		}
		doc[rec.Name] = rec
		value, err := marshal(doc)
		if err != nil {
			return fail(err)
		}
		if rev == 0 {
			_, err = s.create(ctx, key, value)
		} else {
			_, err = s.put(ctx, key, value, rev)
		}
		if errors.Is(err, errWrongRevision) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		return rec, nil
	}
	return fail(fmt.Errorf("journal still contended after %d attempts", maxJournalRetries))
}

// readJournal returns the journal and its revision, 0 when there is none.
func (s *Store) readJournal(ctx context.Context, key string) (journalDoc, uint64, error) {
	e, err := s.get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	doc := journalDoc{}
	if !e.found {
		return doc, 0, nil
	}
	if err := unmarshal(e.value, &doc); err != nil {
		return nil, 0, err
	}
	return doc, e.rev, nil
}

// journal returns the records of the journal key in the order they were
// recorded.
func (s *Store) journal(ctx context.Context, key string) ([]checkpoint.CallRecord, error) {
	doc, _, err := s.readJournal(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var out []checkpoint.CallRecord
	for _, rec := range doc {
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.Before(out[j].At)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
