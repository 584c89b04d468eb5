package kvstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// The spend of a fan-out's branches (checkpoint.Snapshot.BranchSpend) is
// summed where the branch keys are read already: the count of a result's
// writer (countBranches), which reads every branch key when its own is
// the newest, adds their spend and stores the sum at
// sp.<R>.<n>.branches with the count it saw. Each branch keeps its own
// spend in its checkpoint; nothing else is written per branch.
//
// Why not one counter that every result adds to: that is the contention
// the run record avoids on purpose. A thousand branches finishing
// together compare-and-set one key, and under a fleet of 64 in flight
// most rounds are lost (tried: writers ran out of rounds). Why not sum
// the branch keys at each delivery: every branch would read every branch,
// O(N²) for a fan-out of N. Here the sum is written once per count, and
// counts are few while branches commit at once (only the newest writer
// counts); the last writer in stream order always counts, after every
// other write, so a result is in the sum once the writers committing
// with it are done: the lag is the branches in flight, the same slack the
// cap has for branches already running. Results committed by a version
// from before the sum are counted too: the count reads them all.
//
// Counts only grow (a result is never replaced, a failure is not
// counted), and each count reads the branch keys up to the newest
// message, so a sum of a higher count holds every result of a lower one:
// a sum is stored only over one of a lower count, by compare-and-set.
//
// The key has four tokens, so "*.<R>.*" (loadFirstAttempt) and
// "cp.<R>.<n>.*" (the branch keys) never match it.
func spendKey(id string, n int) string {
	return "sp." + id + "." + strconv.Itoa(n) + ".branches"
}

// branchSpend is the document at spendKey.
type branchSpend struct {
	// Count is the results the sum was taken over.
	Count int     `json:"count"`
	Spend float64 `json:"spend"`
}

// spendRounds bounds the compare-and-set rounds of storeBranchSpend: each
// lost round means another count stored its sum meanwhile.
const spendRounds = 10

// storeBranchSpend stores spend, the sum over count results of the
// fan-out whose join is step n of run id, unless a sum over as many is
// stored already. A fan-out that spent nothing writes nothing.
func (s *Store) storeBranchSpend(ctx context.Context, id string, n, count int, spend float64) error {
	key := spendKey(id, n)
	value, err := marshal(branchSpend{Count: count, Spend: spend})
	if err != nil {
		return err
	}
	for range spendRounds {
		e, err := s.get(ctx, key)
		if err != nil {
			return err
		}
		if !e.found && spend == 0 {
			return nil
		}
		if e.found {
			var cur branchSpend
			if err := unmarshal(e.value, &cur); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if cur.Count >= count {
				return nil
			}
		}
		if _, err = s.put(ctx, key, value, e.rev); !errors.Is(err, errWrongRevision) {
			return err
		}
	}
	return fmt.Errorf("%s still contended after %d writes", key, spendRounds)
}

// readBranchSpend reads the sum of the fan-out whose join is step n of run
// id: 0 while none of its results spent anything.
func (s *Store) readBranchSpend(ctx context.Context, id string, n int) (float64, error) {
	key := spendKey(id, n)
	e, err := s.get(ctx, key)
	if err != nil || !e.found {
		return 0, err
	}
	var doc branchSpend
	if err := unmarshal(e.value, &doc); err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	return doc.Spend, nil
}
