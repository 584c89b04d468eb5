package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// CommitBranch creates cp.<R>.<n>.<i>, the outcome of branch i of the
// fan-out whose join is step n: the first writer wins, but a stored
// failure of fewer redrives than the writer's is written over by
// compare-and-set on its revision. The run record is not written: a
// thousand branches compare-and-setting one key would retry each other
// into the ground. Then a result's writer counts: it reads the newest
// message on cp.<R>.<n>.* from the leader, and only when that is its own
// key does it count the fan-out's results (one read of the branch keys,
// failures left out); otherwise a later writer, whose write is newer,
// counts after it and it answers 0. The last writer in stream order
// always counts, after every other write, so at least one writer counts
// them all, with one full count per fan-out instead of one per branch.
// A count also sums what the results spent and stores the sum (spend.go).
// Branch keys are deleted with their run only (Purge, which leaves its
// tombstone): a create succeeds over a delete marker.
func (s *Store) CommitBranch(ctx context.Context, cp checkpoint.Checkpoint) (int, error) {
	fail := func(err error) (int, error) {
		return 0, fmt.Errorf("commit branch %s:%s: %w", cp.RunID, checkpoint.AtBranch(cp.Step, cp.Branch), err)
	}
	if err := readID(cp.RunID); err != nil {
		return fail(err)
	}
	if cp.Step < 2 || cp.Branch < 1 || cp.Branch > checkpoint.MaxBranches {
		return fail(fmt.Errorf("a branch's join is a step after its fan-out, and branches count from 1 to %d", checkpoint.MaxBranches))
	}
	doc, err := marshal(cp)
	if err != nil {
		return fail(err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	// A run key with a value is a run, or its tombstone.
	if e, err := s.get(ctx, runKey(cp.RunID)); err != nil {
		return fail(err)
	} else if !e.found {
		return fail(checkpoint.ErrNotFound)
	} else if isTomb(e.value) {
		return fail(tombError(cp.RunID, e.value))
	}
	key := branchKey(cpKey(cp.RunID, cp.Step), cp.Branch)
	failed, exists, err := s.writeOutcome(ctx, key, doc, cp.Failed(), cp.Redrives)
	if err != nil {
		return fail(err)
	}
	count := 0
	if !failed {
		if count, err = s.countBranches(ctx, cp.RunID, cp.Step, key, cp.Of); err != nil {
			return fail(err)
		}
	}
	if exists {
		return count, fmt.Errorf("commit branch %s:%s: %w", cp.RunID, checkpoint.AtBranch(cp.Step, cp.Branch), checkpoint.ErrCheckpointExists)
	}
	return count, nil
}

// outcomeRetries bounds the compare-and-set rounds of writeOutcome: each
// lost round means another outcome of the branch was written meanwhile.
const outcomeRetries = 10

// writeOutcome writes doc, a failure or not, at branch key key unless an
// outcome is stored there already that a writer of redrives may not
// replace (see CommitBranch). It returns whether the outcome stored now
// is a failure and whether it is another writer's.
func (s *Store) writeOutcome(ctx context.Context, key string, doc []byte, failed bool, redrives int) (bool, bool, error) {
	var rev uint64 // 0: create
	for range outcomeRetries {
		var err error
		if rev == 0 {
			_, err = s.create(ctx, key, doc)
		} else {
			_, err = s.put(ctx, key, doc, rev)
		}
		if err == nil {
			return failed, false, nil
		}
		if !errors.Is(err, errWrongRevision) {
			return failed, false, err
		}
		e, err := s.get(ctx, key)
		if err != nil {
			return failed, false, err
		}
		if !e.found {
			rev = 0 // a delete marker, or gone: create over it
			continue
		}
		var cur checkpoint.Checkpoint
		if err := unmarshal(e.value, &cur); err != nil {
			return failed, false, fmt.Errorf("%s: %w", key, err)
		}
		if !cur.Failed() || cur.Redrives >= redrives {
			return cur.Failed(), true, nil
		}
		rev = e.rev // a failure from before a redrive: write over it
	}
	return failed, false, fmt.Errorf("%s still contended after %d writes", key, outcomeRetries)
}

// countBranches counts the committed results among the of branches of
// the fan-out whose join is step n if the newest branch key is own, and
// stores what they spent; it answers 0 otherwise. The keys are counted
// first (subjects only); their values, to leave failures out and sum the
// spend, are read only when every branch may be in, and every of/16th
// branch for the spend's sake, so a fan-out of N branches reads about 17
// times N values, not N*N/2 (of is 0 on branches written before it was
// recorded: their values are read at every count).
func (s *Store) countBranches(ctx context.Context, id string, n int, own string, of int) (int, error) {
	filter := cpKey(id, n) + ".*"
	subject, _, err := s.getLast(ctx, filter)
	if err != nil {
		return 0, err
	}
	if subject != s.subjects+own {
		return 0, nil
	}
	if of > 0 {
		info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.subjects+filter))
		if err != nil {
			return 0, fmt.Errorf("count %s: %w", filter, err)
		}
		// Failures among the keys only lower the count: fewer than of
		// keys is fewer than of results.
		if keys := len(info.State.Subjects); keys < of && keys%max(1, of/16) != 0 {
			return keys, nil
		}
	}
	count, spend := 0, 0.0
	err = s.scan(ctx, filter, func(e jetstream.KeyValueEntry) error {
		var cp outcome
		if err := unmarshal(e.Value(), &cp); err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		if cp.Status != checkpoint.StatusDead {
			count++
			spend += cp.Spend
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", filter, err)
	}
	if err := s.storeBranchSpend(ctx, id, n, count, spend); err != nil {
		return 0, fmt.Errorf("store the spend of %s: %w", filter, err)
	}
	return count, nil
}

// outcome is the part of a branch key's document a count reads.
type outcome struct {
	Status checkpoint.Status `json:"status"`
	Spend  float64           `json:"spend"`
}

// BranchCheckpoints reads the branch checkpoints of the fan-out whose join
// is step n with one watcher over cp.<R>.<n>.* and returns the results
// among branches 1..total, in branch order (a stored failure is none).
func (s *Store) BranchCheckpoints(ctx context.Context, id string, n, total int) ([]checkpoint.Checkpoint, error) {
	if err := readID(id); err != nil {
		return nil, fmt.Errorf("branch checkpoints %s:%d: %w", id, n, err)
	}
	prefix := cpKey(id, n) + "."
	var out []checkpoint.Checkpoint
	err := s.scan(ctx, prefix+"*", func(e jetstream.KeyValueEntry) error {
		i, err := strconv.Atoi(strings.TrimPrefix(e.Key(), prefix))
		if err != nil {
			return fmt.Errorf("unexpected key %s", e.Key())
		}
		if i < 1 || i > total {
			return nil
		}
		var cp checkpoint.Checkpoint
		if err := unmarshal(e.Value(), &cp); err != nil {
			return fmt.Errorf("%s: %w", e.Key(), err)
		}
		if !cp.Failed() {
			out = append(out, cp)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("branch checkpoints %s:%d: %w", id, n, err)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Branch < out[b].Branch })
	return out, nil
}
