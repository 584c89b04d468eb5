package redisstore

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/redis/go-redis/v9"
)

// The run index. Runs are spread over indexShards shards by a hash of
// their id, so that in a Redis Cluster no key takes every start or every
// transition; a listing merges the shards. Shard k's keys share the hash
// tag {k} (one slot per shard):
//
//	<prefix>:ix{k}:all              zset: run id scored by creation (unix ms)
//	<prefix>:ix{k}:w:<workflow>     zset: the workflow's runs, by creation
//	<prefix>:ix{k}:s:<status>       zset: runs in the status, scored by when they took it
//	<prefix>:ix{k}:ws:<workflow>:<status>  the same, of one workflow
//	<prefix>:ix{k}:n                hash: counters "s:<status>" and "w:<workflow>:<status>"
//
// and the run hash's field st is the status the index holds for the run.
// On one node the script that changes a run's status moves its entries
// (indexLua): index and record never disagree. In a Cluster the entries
// move in a second call right after the run's script; a crash between
// the two leaves a run listed under its old status until a listing of
// that status reads the record and moves it (fixIndex), which the
// scheduler's repair does every pass for the live statuses.

// indexShards is the number of index shards. Changing it moves every run
// to another shard: it is part of the stored format.
const indexShards = 16

func shardOf(id string) int { return int(crc32.ChecksumIEEE([]byte(id)) % indexShards) }

func (s *Store) shardPrefix(k int) string { return s.shards[k] }

func shardPrefixes(prefix string) (p [indexShards]string) {
	for k := range p {
		p[k] = prefix + ":ix{" + strconv.Itoa(k) + "}:"
	}
	return p
}

// indexKey is the zset of shard k that lists the runs q asks for.
func (s *Store) indexKey(k int, status checkpoint.Status, workflow string) string {
	p := s.shardPrefix(k)
	switch {
	case status != "" && workflow != "":
		return p + "ws:" + workflow + ":" + string(status)
	case status != "":
		return p + "s:" + string(status)
	case workflow != "":
		return p + "w:" + workflow
	}
	return p + "all"
}

// indexArgs appends to args the arguments indexLua reads for run: its
// status, its shard's prefix, id, workflow, creation and the time of the
// write; in a Cluster the status and an empty prefix alone (the caller
// moves the entries, see afterIndex).
func (s *Store) indexArgs(args []any, run checkpoint.Run) []any {
	if !s.single {
		return append(args, string(run.Status), "")
	}
	return append(args, string(run.Status), s.shardPrefix(shardOf(run.ID)), run.ID, run.Workflow,
		run.CreatedAt.UnixMilli(), entered(run).UnixMilli())
}

// writeArgs appends to args the index arguments of a write of the step
// path (lightLua): the status alone when it is running, which a step's
// commit nearly always keeps, unless full; all of them otherwise.
func (s *Store) writeArgs(args []any, run checkpoint.Run, full bool) []any {
	if s.single && !full && run.Status == checkpoint.StatusRunning {
		return append(args, string(run.Status), "?")
	}
	return s.indexArgs(args, run)
}

// entered is when run took its status: the write's time.
func entered(run checkpoint.Run) time.Time {
	if run.UpdatedAt.IsZero() {
		return time.Now()
	}
	return run.UpdatedAt
}

// writeReply reads the reply of a script that writes a run (see
// updateScript): the revision or a negative code, and, in a Cluster when
// the status changed, the status the index still holds (ok true).
func writeReply(res any) (rev int64, old string, ok bool, err error) {
	switch v := res.(type) {
	case int64:
		return v, "", false, nil
	case []any:
		if len(v) == 2 {
			rev, rok := v[0].(int64)
			old, sok := v[1].(string)
			if rok && sok {
				return rev, old, true, nil
			}
		}
	}
	return 0, "", false, fmt.Errorf("unexpected script reply %v", res)
}

// afterIndex moves run's index entries from old ("" for a run not indexed
// yet, "*" for wherever they are) to its status: in a Cluster, the second
// call of a write that changed the status.
func (s *Store) afterIndex(ctx context.Context, run checkpoint.Run, old string) error {
	k := shardOf(run.ID)
	p := s.shardPrefix(k)
	err := s.batch.run(ctx, indexScript, []string{p + "n"},
		p, run.ID, old, string(run.Status), run.Workflow, run.CreatedAt.UnixMilli(), entered(run).UnixMilli()).Err()
	if err != nil {
		return fmt.Errorf("index run %s: %w", run.ID, err)
	}
	return nil
}

// fixIndex moves a run listed under a status it no longer has (a write
// of the previous release, or a Cluster write whose index call was lost)
// to the status of its record, as read at run.Rev: the run hash's st
// first, so that the next status change moves the entries from there,
// and the entries (in the same script on one node). A run that moved
// since it was read is left to its writer.
func (s *Store) fixIndex(ctx context.Context, run checkpoint.Run) error {
	moved, err := s.batch.run(ctx, fixScript, []string{s.runKey(run.ID)},
		s.indexArgs([]any{strconv.FormatUint(run.Rev, 10)}, run)...).Int64()
	if err != nil {
		return fmt.Errorf("index run %s: %w", run.ID, err)
	}
	if moved == 1 && !s.single {
		return s.afterIndex(ctx, run, "*")
	}
	return nil
}

// cmpNewest orders keys newest first, then by id, descending (the order
// of ZREVRANGEBYSCORE within a score).
func cmpNewest(a, b checkpoint.Cursor) int {
	if c := b.At.Compare(a.At); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}

// PageRuns reads, from each shard, the newest limit+1 entries after
// q.After, merges them, reads the runs of the newest limit and drops those
// whose record is not in q's status any more (moving their entries).
func (s *Store) PageRuns(ctx context.Context, q checkpoint.PageQuery) (checkpoint.RunPage, error) {
	if err := q.Validate(); err != nil {
		return checkpoint.RunPage{}, fmt.Errorf("page runs: %w", err)
	}
	limit := q.Size()
	keys, err := s.newest(ctx, q, limit+1)
	if err != nil {
		return checkpoint.RunPage{}, fmt.Errorf("page runs: %w", err)
	}
	var page checkpoint.RunPage
	if len(keys) > limit {
		keys = keys[:limit]
		page.Next = keys[limit-1]
	}
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = k.ID
	}
	if page.Runs, err = s.readListed(ctx, ids, q.Status); err != nil {
		return checkpoint.RunPage{}, fmt.Errorf("page runs: %w", err)
	}
	return page, nil
}

// newest returns the keys of the newest n index entries q selects after
// q.After, over every shard: n from each shard in one pipeline, merged.
func (s *Store) newest(ctx context.Context, q checkpoint.PageQuery, n int) ([]checkpoint.Cursor, error) {
	max := "+inf"
	if !q.After.IsZero() {
		max = strconv.FormatInt(q.After.At.UnixMilli(), 10)
	}
	fetch := func(pipe redis.Pipeliner, k, offset int) *redis.ZSliceCmd {
		return pipe.ZRevRangeByScoreWithScores(ctx, s.indexKey(k, q.Status, q.Workflow), &redis.ZRangeBy{
			Max: max, Min: "-inf", Offset: int64(offset), Count: int64(n),
		})
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, indexShards)
	for k := range indexShards {
		cmds[k] = fetch(pipe, k, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var all []checkpoint.Cursor
	for k, cmd := range cmds {
		zs, offset, kept := cmd.Val(), 0, 0
		for {
			for _, z := range zs {
				key := checkpoint.Cursor{At: time.UnixMilli(int64(z.Score)).UTC(), ID: z.Member.(string)}
				if !q.After.IsZero() && cmpNewest(q.After, key) >= 0 {
					continue // the cursor, or an entry before it in its millisecond
				}
				all = append(all, key)
				kept++
			}
			offset += len(zs)
			if len(zs) < n || kept >= n {
				break
			}
			// A shard with n entries or more in the cursor's
			// millisecond: read on (rare, a burst of starts).
			var err error
			if zs, err = s.rdb.ZRevRangeByScoreWithScores(ctx, s.indexKey(k, q.Status, q.Workflow), &redis.ZRangeBy{
				Max: max, Min: "-inf", Offset: int64(offset), Count: int64(n),
			}).Result(); err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(all, cmpNewest)
	return all[:min(n, len(all))], nil
}

// readListed reads the runs ids in order, in pipelines of listBatch.
// A run whose record is gone is skipped; one whose record is not in
// status (when status is set) is skipped and its index entries moved.
func (s *Store) readListed(ctx context.Context, ids []string, status checkpoint.Status) ([]checkpoint.Run, error) {
	runs := make([]checkpoint.Run, 0, len(ids))
	for len(ids) > 0 {
		batch := ids[:min(listBatch, len(ids))]
		ids = ids[len(batch):]
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.SliceCmd, len(batch))
		for i, id := range batch {
			cmds[i] = pipe.HMGet(ctx, s.runKey(id), "doc", "rev")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		for i, cmd := range cmds {
			vals := cmd.Val()
			run, err := decodeRun(vals[0], vals[1])
			if errors.Is(err, checkpoint.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("run %s: %w", batch[i], err)
			}
			if status != "" && run.Status != status {
				if err := s.fixIndex(ctx, run); err != nil {
					return nil, err
				}
				continue
			}
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// ListRuns reads every entry of the index f selects, then the runs, and
// returns them oldest first (by creation, then id).
func (s *Store) ListRuns(ctx context.Context, f checkpoint.Filter) ([]checkpoint.Run, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, indexShards)
	for k := range indexShards {
		cmds[k] = pipe.ZRange(ctx, s.indexKey(k, f.Status, f.Workflow), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	var ids []string
	for _, cmd := range cmds {
		ids = append(ids, cmd.Val()...)
	}
	runs, err := s.readListed(ctx, ids, f.Status)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	slices.SortFunc(runs, func(a, b checkpoint.Run) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return runs, nil
}

// CountRuns sums the counters of every shard.
func (s *Store) CountRuns(ctx context.Context) (checkpoint.RunCounts, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, indexShards)
	for k := range indexShards {
		cmds[k] = pipe.HGetAll(ctx, s.shardPrefix(k)+"n")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return checkpoint.RunCounts{}, fmt.Errorf("count runs: %w", err)
	}
	counts := checkpoint.RunCounts{Status: map[checkpoint.Status]int64{}, Workflow: map[string]map[checkpoint.Status]int64{}}
	for _, cmd := range cmds {
		for field, v := range cmd.Val() {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return checkpoint.RunCounts{}, fmt.Errorf("count runs: counter %s = %q: %w", field, v, err)
			}
			kind, rest, _ := strings.Cut(field, ":")
			switch kind {
			case "s":
				counts.Status[checkpoint.Status(rest)] += n
			case "w":
				wf, st, _ := strings.Cut(rest, ":")
				if counts.Workflow[wf] == nil {
					counts.Workflow[wf] = map[checkpoint.Status]int64{}
				}
				counts.Workflow[wf][checkpoint.Status(st)] += n
			}
		}
	}
	return counts, nil
}

var _ checkpoint.IndexBackfill = (*Store)(nil)

// legacyRunsKey is the one sorted set of every run id that stores before
// the index wrote at each CreateRun (no hash tag: one Cluster slot). The
// backfill drains it: a process of the previous version still adding to
// it during a rolling upgrade is drained on the scheduler's next pass.
func (s *Store) legacyRunsKey() string { return s.prefix + ":runs" }

// BackfillIndex indexes up to batch runs of the legacy run set and takes
// them out of it: a run indexed already (by a write since the upgrade) is
// only taken out, a gone one too, and one that moved while it was read is
// left for the next call.
func (s *Store) BackfillIndex(ctx context.Context, batch int) (checkpoint.BackfillProgress, error) {
	var p checkpoint.BackfillProgress
	if batch < 1 {
		return p, fmt.Errorf("backfill index: batch %d, want at least 1", batch)
	}
	ids, err := s.rdb.ZRange(ctx, s.legacyRunsKey(), 0, int64(batch-1)).Result()
	if err != nil {
		return p, fmt.Errorf("backfill index: %w", err)
	}
	var done []any
	for len(ids) > 0 {
		chunk := ids[:min(listBatch, len(ids))]
		ids = ids[len(chunk):]
		pipe := s.rdb.Pipeline()
		reads := make([]*redis.SliceCmd, len(chunk))
		for i, id := range chunk {
			reads[i] = pipe.HMGet(ctx, s.runKey(id), "doc", "rev")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return p, fmt.Errorf("backfill index: %w", err)
		}
		for i, id := range chunk {
			vals := reads[i].Val()
			run, err := decodeRun(vals[0], vals[1])
			if errors.Is(err, checkpoint.ErrNotFound) || !checkpoint.ValidID(id) {
				done = append(done, id)
				continue
			}
			if err != nil {
				return p, fmt.Errorf("backfill index: run %s: %w", id, err)
			}
			res, err := s.batch.run(ctx, backfillScript, []string{s.runKey(id)},
				s.indexArgs([]any{strconv.FormatUint(run.Rev, 10)}, run)...).Result()
			if err != nil {
				return p, fmt.Errorf("backfill index: run %s: %w", id, err)
			}
			rev, old, moved, err := writeReply(res)
			if err != nil {
				return p, fmt.Errorf("backfill index: run %s: %w", id, err)
			}
			if moved {
				if err := s.afterIndex(ctx, run, old); err != nil {
					return p, fmt.Errorf("backfill index: %w", err)
				}
			}
			switch {
			case rev == 1:
				p.Indexed++
				done = append(done, id)
			case rev == 0 && !s.single:
				// Indexed by a write whose index call (a second call in
				// a Cluster) may have been lost: put its entries where
				// its record says, which changes nothing if they are.
				if err := s.afterIndex(ctx, run, "*"); err != nil {
					return p, fmt.Errorf("backfill index: %w", err)
				}
				done = append(done, id)
			case rev == 0 || rev == codeNotFound:
				done = append(done, id)
			}
		}
	}
	if len(done) > 0 {
		if err := s.rdb.ZRem(ctx, s.legacyRunsKey(), done...).Err(); err != nil {
			return p, fmt.Errorf("backfill index: %w", err)
		}
	}
	left, err := s.rdb.ZCard(ctx, s.legacyRunsKey()).Result()
	if err != nil {
		return p, fmt.Errorf("backfill index: %w", err)
	}
	p.Remaining, p.Done = int(left), left == 0
	return p, nil
}
