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

// RecordCall journals rec in the step or branch at, first writer wins by
// rec.Name, and returns the stored record. The journal of a step (key
// j.<R>.<n>) or of a branch (j.<R>.<n>.<i>) is one key updated by
// compare-and-set; on a lost race it re-reads and, if the name is now
// taken, returns the winner's record.
func (s *Store) RecordCall(ctx context.Context, id string, at checkpoint.StepRef, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	if at.Branch < 0 {
		return checkpoint.CallRecord{}, fmt.Errorf("record call %s:%s %q: branches count from 1", id, at, rec.Name)
	}
	if err := readID(id); err != nil {
		return checkpoint.CallRecord{}, fmt.Errorf("record call %q: %w", rec.Name, err)
	}
	fail := func(err error) (checkpoint.CallRecord, error) {
		return checkpoint.CallRecord{}, fmt.Errorf("record call %s:%s %q: %w", id, at, rec.Name, err)
	}
	key := branchKey(journalKey(id, at.Step), at.Branch)
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
