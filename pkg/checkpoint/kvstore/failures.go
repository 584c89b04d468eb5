package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// maxFailureRetries bounds the compare-and-set loop of RecordFailure; each
// lost round means another failure of the same step was counted meanwhile.
const maxFailureRetries = 100

// failuresDoc is the value of f.<R>.<n>. Count is exact; Recent holds the
// last checkpoint.MaxFailureRecords records, oldest first.
type failuresDoc struct {
	Count  int                  `json:"count"`
	Recent []checkpoint.Failure `json:"recent"`
}

// RecordFailure counts a failed attempt of the step or branch at and
// keeps its record. The failures of a step (key f.<R>.<n>) or of a branch
// (f.<R>.<n>.<i>) are one key updated by compare-and-set, so concurrent
// calls each count once: a lost race re-reads and counts again.
func (s *Store) RecordFailure(ctx context.Context, id string, at checkpoint.StepRef, f checkpoint.Failure) (int, error) {
	if at.Branch < 0 {
		return 0, fmt.Errorf("record failure %s:%s: branches count from 1", id, at)
	}
	if err := readID(id); err != nil {
		return 0, fmt.Errorf("record failure: %w", err)
	}
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("record failure %s:%s: %w", id, at, err)
	}
	if at.Step < 1 {
		return fail(errors.New("steps count from 1"))
	}
	f = f.Trimmed()
	key := branchKey(failuresKey(id, at.Step), at.Branch)
	for range maxFailureRetries {
		doc, rev, err := s.readFailures(ctx, key)
		if err != nil {
			return fail(err)
		}
		if rev == 0 {
			// Only the first failure checks the run: an existing key
			// means an existing run, or one being purged (its record
			// goes first).
			if e, err := s.get(ctx, runKey(id)); err != nil {
				return fail(err)
			} else if !e.found {
				return fail(checkpoint.ErrNotFound)
			} else if isTomb(e.value) {
				return fail(tombError(id, e.value))
			}
		}
		doc.Count++
		doc.Recent = append(doc.Recent, f)
		if extra := len(doc.Recent) - checkpoint.MaxFailureRecords; extra > 0 {
			doc.Recent = doc.Recent[extra:]
		}
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
		return doc.Count, nil
	}
	return fail(fmt.Errorf("failures still contended after %d attempts", maxFailureRetries))
}

// readFailures returns the failures document and its revision, 0 when
// there is none.
func (s *Store) readFailures(ctx context.Context, key string) (failuresDoc, uint64, error) {
	e, err := s.get(ctx, key)
	if err != nil || !e.found {
		return failuresDoc{}, 0, err
	}
	var doc failuresDoc
	if err := unmarshal(e.value, &doc); err != nil {
		return failuresDoc{}, 0, err
	}
	return doc, e.rev, nil
}

// failures returns the kept failure records of the failures key, oldest
// first.
func (s *Store) failures(ctx context.Context, key string) ([]checkpoint.Failure, error) {
	doc, _, err := s.readFailures(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("failures: %w", err)
	}
	return doc.Recent, nil
}
