package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/redis/go-redis/v9"
)

// CreateRun stores run with revision 1 unless the id is taken, then adds it
// to the run index. CreatedAt defaults to now and UpdatedAt to CreatedAt.
// A duplicate returns the stored run and ErrRunExists, and re-indexes it:
// the index is written after the run, so a retry repairs a crash between.
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
	// The run and its index entry are written in one round trip (two
	// slots in a Cluster). NX keeps an existing run's entry as it is; an
	// existing run that was not indexed yet is set to its own creation
	// time below. In a Cluster the entry may be written while the create
	// fails: listing skips ids without a run.
	create, zadd := s.batch.runWith(ctx, createScript, []string{s.runKey(run.ID)}, []any{doc},
		"ZADD", s.runsKey(), "NX", run.CreatedAt.UnixMilli(), run.ID)
	res, err := create.Result()
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("create run %s: %w", run.ID, err)
	}
	result := run
	result.Rev = 1
	created := true
	if existing, ok := res.([]any); ok {
		if len(existing) != 2 {
			return checkpoint.Run{}, fmt.Errorf("create run %s: unexpected reply %v", run.ID, res)
		}
		if result, err = decodeRun(existing[0], existing[1]); err != nil {
			return checkpoint.Run{}, fmt.Errorf("create run %s: read existing: %w", run.ID, err)
		}
		created = false
	}
	if err := zadd.Err(); err != nil {
		return result, fmt.Errorf("create run %s: index run: %w (CreateRun again to repair the index)", run.ID, err)
	}
	if !created {
		if err := s.index(ctx, result); err != nil {
			return result, fmt.Errorf("create run %s: %w (CreateRun again to repair the index)", run.ID, err)
		}
	}
	if !created {
		return result, fmt.Errorf("create run %s: %w", run.ID, checkpoint.ErrRunExists)
	}
	return result, nil
}

func (s *Store) index(ctx context.Context, run checkpoint.Run) error {
	z := redis.Z{Score: float64(run.CreatedAt.UnixMilli()), Member: run.ID}
	if err := s.rdb.ZAdd(ctx, s.runsKey(), z).Err(); err != nil {
		return fmt.Errorf("index run: %w", err)
	}
	return nil
}

// GetRun returns the run or ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (checkpoint.Run, error) {
	if err := readID(id); err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run: %w", err)
	}
	vals, err := s.batch.command(ctx, "HMGET", s.runKey(id), "doc", "rev").Slice()
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	if len(vals) != 2 {
		return checkpoint.Run{}, fmt.Errorf("get run %s: unexpected reply of %d elements", id, len(vals))
	}
	run, err := decodeRun(vals[0], vals[1])
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// listBatch bounds one pipeline of run reads in ListRuns.
const listBatch = 256

// ListRuns reads every indexed run and filters in the client, so it costs
// one read per run: an operator listing, not a hot path. Ids whose run key
// is gone are skipped.
func (s *Store) ListRuns(ctx context.Context, f checkpoint.Filter) ([]checkpoint.Run, error) {
	ids, err := s.rdb.ZRange(ctx, s.runsKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	var runs []checkpoint.Run
	for len(ids) > 0 {
		batch := ids[:min(listBatch, len(ids))]
		ids = ids[len(batch):]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(batch))
		for i, id := range batch {
			cmds[i] = pipe.HMGet(ctx, s.runKey(id), "doc", "rev")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		for i, cmd := range cmds {
			vals := cmd.Val()
			run, err := decodeRun(vals[0], vals[1])
			if errors.Is(err, checkpoint.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list runs: run %s: %w", batch[i], err)
			}
			if (f.Status == "" || run.Status == f.Status) && (f.Workflow == "" || run.Workflow == f.Workflow) {
				runs = append(runs, run)
			}
		}
	}
	// The index scores milliseconds; order by the full timestamp.
	sort.SliceStable(runs, func(i, j int) bool {
		if !runs[i].CreatedAt.Equal(runs[j].CreatedAt) {
			return runs[i].CreatedAt.Before(runs[j].CreatedAt)
		}
		return runs[i].ID < runs[j].ID
	})
	return runs, nil
}

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
	rev, err := s.batch.run(ctx, updateScript, keys,
		append([]any{strconv.FormatUint(run.Rev, 10), doc}, spilled...)...).Int64()
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("update run %s: %w", run.ID, err)
	}
	if rev < 0 {
		return checkpoint.Run{}, fmt.Errorf("update run %s at rev %d: %w", run.ID, run.Rev, scriptCode(rev))
	}
	run.Rev = uint64(rev)
	return run, nil
}
