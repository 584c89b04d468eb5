package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// The deadline index is one global ZSET, <prefix>:due: member run id, score
// the due time in unix milliseconds. A claim moves an entry's score to the
// end of its lease, which hides it from other claimers until then and
// brings it back if the claimer dies. It is written outside the per-run
// scripts (a different Cluster slot); the scheduler repairs a missing entry
// from the run records.

// IndexDue puts id in the deadline index at at (millisecond resolution),
// replacing an earlier entry and any lease on it.
func (s *Store) IndexDue(ctx context.Context, id string, at time.Time) error {
	if err := readID(id); err != nil {
		return fmt.Errorf("index due: %w", err)
	}
	if err := s.batch.command(ctx, "ZADD", s.dueKey(), at.UnixMilli(), id).Err(); err != nil {
		return fmt.Errorf("index due %s: %w", id, err)
	}
	return nil
}

// UnindexDue removes id from the deadline index; an absent id is no error.
func (s *Store) UnindexDue(ctx context.Context, id string) error {
	if err := readID(id); err != nil {
		return fmt.Errorf("unindex due: %w", err)
	}
	if err := s.batch.command(ctx, "ZREM", s.dueKey(), id).Err(); err != nil {
		return fmt.Errorf("unindex due %s: %w", id, err)
	}
	return nil
}

// ClaimDue claims up to limit ids due at or before now, earliest first, in
// one script: the read and the lease are atomic, so two schedulers never
// get the same entry while its lease runs.
func (s *Store) ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error) {
	if err := checkClaim(limit, lease); err != nil {
		return nil, fmt.Errorf("claim due: %w", err)
	}
	ids, err := claimDueScript.Run(ctx, s.rdb, []string{s.dueKey()},
		strconv.FormatInt(now.UnixMilli(), 10), limit, leaseScore(now.Add(lease))).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("claim due: %w", err)
	}
	return ids, nil
}

// leaseScore is the score of a lease ending at until: its millisecond and
// a half, never a deadline's score (whole milliseconds). The entry is
// claimable again from the next millisecond on.
func leaseScore(until time.Time) string {
	return strconv.FormatInt(until.UnixMilli(), 10) + ".5"
}

// finishChunk bounds the entries of one finishDueScript call: the script
// holds Redis for its whole run, a few microseconds an entry.
const finishChunk = 1000

// FinishDue moves or removes each entry of done that still holds the
// lease that ended at leaseUntil, in one script per finishChunk entries
// (see checkpoint.Store): a sweep's batch costs one round trip, not one
// per run.
func (s *Store) FinishDue(ctx context.Context, leaseUntil time.Time, done ...checkpoint.DueNext) error {
	for _, d := range done {
		if err := readID(d.ID); err != nil {
			return fmt.Errorf("finish due: %w", err)
		}
	}
	for len(done) > 0 {
		chunk := done[:min(finishChunk, len(done))]
		done = done[len(chunk):]
		args := make([]any, 0, 1+2*len(chunk))
		args = append(args, leaseScore(leaseUntil))
		for _, d := range chunk {
			to := ""
			if !d.Next.IsZero() {
				to = strconv.FormatInt(d.Next.UnixMilli(), 10)
			}
			args = append(args, d.ID, to)
		}
		if err := s.batch.run(ctx, finishDueScript, []string{s.dueKey()}, args...).Err(); err != nil {
			return fmt.Errorf("finish due (%d entries, first %s): %w", len(chunk), chunk[0].ID, err)
		}
	}
	return nil
}

// checkClaim refuses a claim that could never hide anything.
func checkClaim(limit int, lease time.Duration) error {
	if limit < 1 {
		return fmt.Errorf("limit %d: claim at least one entry", limit)
	}
	if lease < time.Millisecond {
		return fmt.Errorf("lease %v: leases count in milliseconds, use at least 1ms", lease)
	}
	return nil
}
