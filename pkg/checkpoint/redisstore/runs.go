package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// CreateRun stores run with revision 1 unless the id is taken, and
// indexes it in the same script (on one node) or right after (in a
// Cluster). CreatedAt defaults to now and UpdatedAt to CreatedAt. A
// duplicate returns the stored run and ErrRunExists.
func (s *Store) CreateRun(ctx context.Context, run checkpoint.Run) (checkpoint.Run, error) {
	if err := checkID(run.ID); err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run: %w", err)
	}
	if run.CreatedAt.IsZero() {
		run.CreatedAt = time.Now().UTC()
	}
	if run.UpdatedAt.IsZero() {
		run.UpdatedAt = run.CreatedAt
	}
	doc, err := marshal(run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, err)
	}
	res, err := s.batch.run(ctx, createScript, []string{s.runKey(run.ID)}, s.indexArgs([]any{doc}, run)...).Result()
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, err)
	}
	result := run
	result.Rev = 1
	switch v := res.(type) {
	case int64:
		return result, nil
	case []any:
		if _, created := v[0].(int64); created && len(v) == 2 { // {1, old}: index it here
			// A run in no index is in no listing either, where a
			// repair would find it: the caller creates it again (which
			// client.Start's "start it again" does), and the duplicate
			// create below indexes it.
			if err := s.afterIndex(ctx, run, ""); err != nil {
				return result, fmt.Errorf("create run %s: created, not indexed: %w (CreateRun again to index it)", run.ID, err)
			}
			return result, nil
		}
		if len(v) == 3 {
			if v[0] == nil {
				if perr := purgedError(run.ID, v[2]); perr != nil {
					var pe *checkpoint.PurgedError
					if !errors.As(perr, &pe) {
						return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, perr)
					}
					t := pe.Tombstone
					existing := checkpoint.Run{ID: t.ID, Workflow: t.Workflow, Status: t.Status, UpdatedAt: t.EndedAt}
					return existing, fmt.Errorf("create run %s: %w (%w)", run.ID, checkpoint.ErrRunExists, perr)
				}
			}
			if result, err = decodeRun(v[0], v[1]); err != nil {
				return checkpoint.Run{}, fmt.Errorf("create run %s: read existing: %w", run.ID, err)
			}
			if !s.single {
				// The create that made it may have died before its
				// index call (a second call in a Cluster): a retry
				// puts the entries where the record says.
				if err := s.afterIndex(ctx, result, "*"); err != nil {
					return result, fmt.Errorf("create run %s: %w (CreateRun again to repair the index)", run.ID, err)
				}
			}
			return result, fmt.Errorf("create run %s: %w", run.ID, checkpoint.ErrRunExists)
		}
	}
	return checkpoint.Run{}, fmt.Errorf("create run %s: unexpected reply %v", run.ID, res)
}

// GetRun returns the run or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (checkpoint.Run, error) {
	if err := readID(id); err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run: %w", err)
	}
	vals, err := s.batch.command(ctx, "HMGET", s.runKey(id), "doc", "rev", "tomb").Slice()
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	if len(vals) != 3 {
		return checkpoint.Run{}, fmt.Errorf("get run %s: unexpected reply of %d elements", id, len(vals))
	}
	if vals[0] == nil {
		if err := purgedError(id, vals[2]); err != nil {
			return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
		}
	}
	run, err := decodeRun(vals[0], vals[1])
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// listBatch bounds one pipeline of run reads in a listing.
const listBatch = 256

// UpdateRun replaces the run if run.Rev is still the stored revision.
func (s *Store) UpdateRun(ctx context.Context, run checkpoint.Run) (checkpoint.Run, error) {
	if err := readID(run.ID); err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run: %w", err)
	}
	spilled, err := spillArgs(&run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	doc, err := marshal(run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	keys := append([]string{s.runKey(run.ID)}, s.spillKeys(run.ID)...)
	rev, err := s.write(ctx, run, updateScript, keys, func(full bool) []any {
		args := make([]any, 0, 8+len(spilled))
		args = append(args, strconv.FormatUint(run.Rev, 10), doc)
		return append(s.writeArgs(args, run, full), spilled...)
	})
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	if rev < 0 {
		return checkpoint.Run{}, fmt.Errorf("update run %s at rev %d: %w", run.ID, run.Rev, scriptCode(rev))
	}
	run.Rev = uint64(rev)
	return run, nil
}

// write runs script (updateScript, commitScript), a write of run with
// the arguments args builds (full: with every index argument, see
// lightLua), and returns its reply: the new revision or a negative code.
// A write that changes the status of a run it sent without the index
// arguments is sent again with them. In a Cluster, when the run's
// status changed, it moves the run's index entries.
//
// A failure to move them is logged (zerolog.Ctx) and the write succeeds:
// the record, the truth, is written, and the run stays listed under its
// old status until a listing of that status reads it and moves it
// (fixIndex; the scheduler's repair lists running and waiting runs every
// pass). An error would say the write failed when it did not, and a
// caller's retry would mend nothing: a worker's redelivery finds the
// checkpoint committed and follows it, without writing again.
func (s *Store) write(ctx context.Context, run checkpoint.Run, script *redis.Script, keys []string, args func(full bool) []any) (int64, error) {
	res, err := s.batch.run(ctx, script, keys, args(false)...).Result()
	if rev, ok := res.(int64); ok && rev == codeIndexArgs {
		res, err = s.batch.run(ctx, script, keys, args(true)...).Result()
	}
	if err != nil {
		return 0, err
	}
	rev, old, moved, err := writeReply(res)
	if err != nil || !moved {
		return rev, err
	}
	if err := s.afterIndex(ctx, run, old); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("run_id", run.ID).Str("status", string(run.Status)).
			Msg("run written, its index entries not moved; the next listing of its old status moves them")
	}
	return rev, nil
}
