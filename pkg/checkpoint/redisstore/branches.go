package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// branchScript stores a branch's outcome first-writer-wins and marks a
// result in the fan-out's bitmap, in one step. KEYS: run, branch
// checkpoint, bitmap, spend. ARGV: checkpoint JSON, branch index, 1 for a
// result or 0 for a failure, the writer's redrives, the result's spend. A
// stored failure of fewer redrives than the writer's is written over (a
// redrive grants the branch a new outcome); any other stored outcome
// stays. A result it writes adds its spend to the fan-out's sum in the
// same step, so the sum counts each result once. Reply: {wrote (1 or 0),
// branches committed}, or -1 when the run is missing. The count is
// returned to a duplicate too: the redelivery of a writer that died before
// publishing the join must learn that all branches are in.
var branchScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local wrote, result = 0, ARGV[3] == '1'
local cur = redis.call('GET', KEYS[2])
if cur then
  local ok, doc = pcall(cjson.decode, cur)
  local failed = ok and type(doc) == 'table' and doc.status == 'dead'
  if failed and (tonumber(doc.redrives) or 0) < tonumber(ARGV[4]) then
    cur = false
  else
    result = not failed
  end
end
if not cur then
  redis.call('SET', KEYS[2], ARGV[1])
  wrote = 1
  if result and ARGV[5] ~= '0' then redis.call('INCRBYFLOAT', KEYS[4], ARGV[5]) end
end
if result then redis.call('SETBIT', KEYS[3], ARGV[2], 1) end
return {wrote, redis.call('BITCOUNT', KEYS[3])}
`)

func (s *Store) bitsKey(id string, n int) string { return s.stepKeys(id, n, 0).cp + ":bits" }

// spendKey holds what the results of the fan-out whose join is step n
// spent, a decimal number (INCRBYFLOAT); absent while they spent nothing.
func (s *Store) spendKey(id string, n int) string { return s.stepKeys(id, n, 0).cp + ":spend" }

// CommitBranch writes the outcome of branch cp.Branch of the fan-out
// whose join is step cp.Step, first writer wins, and for a result sets
// the branch's bit in the fan-out's bitmap (<prefix>:{R}:cp:<n>:bits, a
// key of its own so that branches never move the run's revision) and adds
// its spend to <prefix>:{R}:cp:<n>:spend. It returns the bitmap's count,
// to a duplicate as well (with ErrCheckpointExists); 0 to a failure's
// writer.
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
	k := s.stepKeys(cp.RunID, cp.Step, cp.Branch)
	result := 1
	if cp.Failed() {
		result = 0
	}
	keys := []string{k.run, k.cp, s.bitsKey(cp.RunID, cp.Step), s.spendKey(cp.RunID, cp.Step)}
	spend := strconv.FormatFloat(cp.Spend, 'f', -1, 64)
	res, err := s.batch.run(ctx, branchScript, keys, doc, cp.Branch, result, cp.Redrives, spend).Result()
	if err != nil {
		return fail(err)
	}
	if code, ok := res.(int64); ok {
		return fail(scriptCode(code))
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 2 {
		return fail(fmt.Errorf("unexpected reply %v", res))
	}
	wrote, _ := reply[0].(int64)
	count, _ := reply[1].(int64)
	if cp.Failed() {
		count = 0
	}
	if wrote == 0 {
		return int(count), fmt.Errorf("commit branch %s:%s: %w", cp.RunID, checkpoint.AtBranch(cp.Step, cp.Branch), checkpoint.ErrCheckpointExists)
	}
	return int(count), nil
}

// BranchCheckpoints reads branches 1..total of the fan-out whose join is
// step n with one MGET (all keys share the run's slot) and returns those
// committed, in branch order (a stored failure is not a commit).
func (s *Store) BranchCheckpoints(ctx context.Context, id string, n, total int) ([]checkpoint.Checkpoint, error) {
	if err := readID(id); err != nil {
		return nil, fmt.Errorf("branch checkpoints %s:%d: %w", id, n, err)
	}
	if total < 1 {
		return nil, nil
	}
	keys := make([]string, total)
	for i := range keys {
		keys[i] = s.stepKeys(id, n, i+1).cp
	}
	docs, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("branch checkpoints %s:%d: %w", id, n, err)
	}
	var out []checkpoint.Checkpoint
	for i, doc := range docs {
		cp, err := decodeOptionalCheckpoint(doc)
		if err != nil {
			return nil, fmt.Errorf("branch checkpoints %s:%s: %w", id, checkpoint.AtBranch(n, i+1), err)
		}
		if cp != nil && !cp.Failed() {
			out = append(out, *cp)
		}
	}
	return out, nil
}
