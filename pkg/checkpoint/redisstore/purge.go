package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/pkg/checkpoint"
)

var _ checkpoint.Retention = (*Store)(nil)

// codeLive: purgeScript found the run not ended.
const codeLive = -4

// tombstone is the stored form of a checkpoint.Tombstone, small: times
// in unix ms; the id is the key's.
type tombstone struct {
	Workflow string            `json:"w"`
	Status   checkpoint.Status `json:"s"`
	Ended    int64             `json:"e"`
	Purged   int64             `json:"p"`
}

func (t tombstone) of(id string) checkpoint.Tombstone {
	return checkpoint.Tombstone{ID: id, Workflow: t.Workflow, Status: t.Status,
		EndedAt: time.UnixMilli(t.Ended).UTC(), PurgedAt: time.UnixMilli(t.Purged).UTC()}
}

// purgedError reads a run hash's tomb field into a *PurgedError; nil
// when v holds none.
func purgedError(id string, v any) error {
	doc, ok, err := str(v)
	if err != nil || !ok {
		return err
	}
	var t tombstone
	if err := json.Unmarshal([]byte(doc), &t); err != nil {
		return fmt.Errorf("run %s: tombstone %q: %w", id, doc, err)
	}
	return &checkpoint.PurgedError{Tombstone: t.of(id)}
}

// EndedBefore merges the earliest entries before cutoff of each shard's
// index of each ended status (earliest) and reads the runs of the
// earliest limit. One that is not ended any more (redriven) has its
// entries moved and is left out.
func (s *Store) EndedBefore(ctx context.Context, cutoff time.Time, limit int) ([]checkpoint.Run, error) {
	if limit < 1 {
		return nil, fmt.Errorf("ended runs: limit %d, want at least 1", limit)
	}
	var ended []checkpoint.Status
	for _, st := range checkpoint.Statuses() {
		if st.Terminal() {
			ended = append(ended, st)
		}
	}
	var zsets []string
	for k := range indexShards {
		for _, st := range ended {
			zsets = append(zsets, s.indexKey(k, st, ""))
		}
	}
	keys, err := s.earliest(ctx, zsets, "("+strconv.FormatInt(cutoff.UnixMilli(), 10), limit)
	if err != nil {
		return nil, fmt.Errorf("ended runs: %w", err)
	}
	ids := make([]string, 0, min(limit, len(keys)))
	for _, k := range keys[:min(limit, len(keys))] {
		ids = append(ids, k.ID)
	}
	runs, err := s.readListed(ctx, ids, "")
	if err != nil {
		return nil, fmt.Errorf("ended runs: %w", err)
	}
	out := runs[:0]
	for _, r := range runs {
		if !r.Status.Terminal() {
			if err := s.fixIndex(ctx, r); err != nil {
				return nil, fmt.Errorf("ended runs: %w", err)
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// Purge deletes run and every key stored under it in one script
// (purgeScript), compare-and-set on run.Rev, leaving the tombstone. It
// reads neither the run's document nor its checkpoints: the keys of its
// fan-outs' branches are named from the run hash's list of fan-outs,
// which Commit keeps, or, in a run created before that list existed,
// found in its checkpoints.
func (s *Store) Purge(ctx context.Context, run checkpoint.Run, tombstoneTTL time.Duration) error {
	if err := readID(run.ID); err != nil {
		return fmt.Errorf("purge run: %w", err)
	}
	if !run.Status.Terminal() {
		return fmt.Errorf("purge run %s: it is %s, not ended", run.ID, run.Status)
	}
	now := time.Now()
	doc, err := json.Marshal(tombstone{Workflow: run.Workflow, Status: run.Status, Ended: run.UpdatedAt.UnixMilli(), Purged: now.UnixMilli()})
	if err != nil {
		return fmt.Errorf("purge run %s: %w", run.ID, err)
	}
	var until int64
	if tombstoneTTL > 0 {
		until = now.Add(tombstoneTTL).UnixMilli()
	}
	p := s.shardPrefix(shardOf(run.ID))
	argP := p
	if !s.single {
		argP = ""
	}
	code, err := s.batch.run(ctx, purgeScript, []string{s.runKey(run.ID)}, strconv.FormatUint(run.Rev, 10), doc, tombstoneTTL.Milliseconds(),
		argP, run.ID, run.Workflow, run.CreatedAt.UnixMilli(), until, s.tag(run.ID), run.Step+1).Int64()
	if err != nil {
		return fmt.Errorf("purge run %s: %w", run.ID, err)
	}
	switch code {
	case 1:
	case codeLive:
		return fmt.Errorf("purge run %s: the stored run is not ended", run.ID)
	default:
		return fmt.Errorf("purge run %s at rev %d: %w", run.ID, run.Rev, scriptCode(code))
	}
	if !s.single {
		err := s.batch.run(ctx, dropScript, []string{p + "n"}, p, run.ID, run.Workflow, string(run.Status), run.CreatedAt.UnixMilli(), until).Err()
		if err != nil {
			return fmt.Errorf("purge run %s: drop its index entries: %w", run.ID, err)
		}
	}
	return nil
}

// Tombstones counts the tombstones kept: each shard's counters hold how
// many expire on each day ("t:<unix day>"), so the count is right to the
// day (a tombstone expiring later today still counts), and a day's
// counter past is deleted here. No entry per tombstone is kept besides
// the tombstone itself.
func (s *Store) Tombstones(ctx context.Context) (int64, error) {
	today := time.Now().UnixMilli() / (24 * 3600 * 1000)
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, indexShards)
	for k := range indexShards {
		cmds[k] = pipe.HGetAll(ctx, s.shardPrefix(k)+"n")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("count tombstones: %w", err)
	}
	var n int64
	for k, cmd := range cmds {
		var past []string
		for field, v := range cmd.Val() {
			day, ok := strings.CutPrefix(field, "t:")
			if !ok {
				continue
			}
			d, err := strconv.ParseInt(day, 10, 64)
			c, cerr := strconv.ParseInt(v, 10, 64)
			if err != nil || cerr != nil {
				return 0, fmt.Errorf("count tombstones: counter %s = %q", field, v)
			}
			if d < today {
				past = append(past, field)
				continue
			}
			n += c
		}
		if len(past) > 0 {
			if err := s.rdb.HDel(ctx, s.shardPrefix(k)+"n", past...).Err(); err != nil {
				return 0, fmt.Errorf("count tombstones: %w", err)
			}
		}
	}
	return n, nil
}

// earliest returns the limit earliest entries scored below max over
// zsets, in order. It reads each zset a page at a time, a page being a
// fair share of limit, and reads on only in the zsets whose page ended
// before the limit-th entry of the merge so far: what it fetches is
// about limit, not limit for each zset.
func (s *Store) earliest(ctx context.Context, zsets []string, max string, limit int) ([]checkpoint.Cursor, error) {
	page := limit/len(zsets) + 8
	offset := make([]int, len(zsets))
	open := make([]bool, len(zsets)) // the last page was full: more may follow
	last := make([]float64, len(zsets))
	var keys []checkpoint.Cursor
	todo := make([]int, len(zsets))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.ZSliceCmd, len(todo))
		for j, i := range todo {
			cmds[j] = pipe.ZRangeByScoreWithScores(ctx, zsets[i], &redis.ZRangeBy{Min: "-inf", Max: max, Offset: int64(offset[i]), Count: int64(page)})
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for j, i := range todo {
			zs := cmds[j].Val()
			for _, z := range zs {
				keys = append(keys, checkpoint.Cursor{At: time.UnixMilli(int64(z.Score)), ID: z.Member.(string)})
				last[i] = z.Score
			}
			offset[i] += len(zs)
			open[i] = len(zs) == page
		}
		slices.SortFunc(keys, func(a, b checkpoint.Cursor) int {
			if c := a.At.Compare(b.At); c != 0 {
				return c
			}
			return strings.Compare(a.ID, b.ID)
		})
		keys = keys[:min(limit, len(keys))]
		// Read on in a zset whose next entries may come before the
		// limit-th entry (or while there are fewer than limit).
		todo = todo[:0]
		for i := range zsets {
			if open[i] && (len(keys) < limit || last[i] <= float64(keys[len(keys)-1].At.UnixMilli())) {
				todo = append(todo, i)
			}
		}
	}
	return keys, nil
}
