package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/redis/go-redis/v9"
)

// Commit writes cp first-writer-wins together with run in one script, if
// run.Rev is still the stored revision, and lists a fan-out of cp in the
// run hash for Purge. cp.RunID defaults to run.ID.
func (s *Store) Commit(ctx context.Context, run checkpoint.Run, cp checkpoint.Checkpoint) (checkpoint.Run, error) {
	if cp.RunID == "" {
		cp.RunID = run.ID
	}
	if err := checkCommit(run, cp); err != nil {
		return checkpoint.Run{}, err
	}
	spilled, err := spillArgs(&run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d: %w", run.ID, cp.Step, err)
	}
	runDoc, err := marshal(&run)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d: %w", run.ID, cp.Step, err)
	}
	cpDoc, err := marshal(&cp)
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d: %w", run.ID, cp.Step, err)
	}
	branches := 0 // the fan-outs listed in the run hash (commitScript)
	if cp.FanOut != nil {
		branches = len(cp.FanOut.Branches)
	}
	keys := s.commitKeys(run.ID, cp.Step)
	rev, err := s.write(ctx, run, commitScript, keys, func(full bool) []any {
		args := make([]any, 0, 11+len(spilled))
		args = append(args, strconv.FormatUint(run.Rev, 10), runDoc, cpDoc, cp.Step, branches)
		return append(s.writeArgs(args, run, full), spilled...)
	})
	if err != nil {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d: %w", run.ID, cp.Step, err)
	}
	if rev < 0 {
		return checkpoint.Run{}, fmt.Errorf("commit checkpoint %s:%d at rev %d: %w", run.ID, cp.Step, run.Rev, scriptCode(rev))
	}
	run.Rev = uint64(rev)
	return run, nil
}

func checkCommit(run checkpoint.Run, cp checkpoint.Checkpoint) error {
	if err := readID(run.ID); err != nil {
		return fmt.Errorf("commit checkpoint: %w", err)
	}
	if cp.RunID != run.ID {
		return fmt.Errorf("commit checkpoint %s:%d: checkpoint belongs to run %q", run.ID, cp.Step, cp.RunID)
	}
	if cp.Step < 1 {
		return fmt.Errorf("commit checkpoint %s:%d: steps count from 1", run.ID, cp.Step)
	}
	return nil
}

// Load reads run id and what its step or branch at needs in one script,
// so the parts are consistent with each other: for step n, checkpoints n
// and n-1 and the journal and failures of step n; for branch i of the
// fan-out whose join is step n, the branch's checkpoint, the fan-out's
// checkpoint n-1, the branch's journal and failures and what the
// fan-out's branches spent.
func (s *Store) Load(ctx context.Context, id string, at checkpoint.StepRef) (checkpoint.Snapshot, error) {
	fail := func(err error) (checkpoint.Snapshot, error) {
		return checkpoint.Snapshot{}, fmt.Errorf("load %s:%s: %w", id, at, err)
	}
	if err := readID(id); err != nil {
		return fail(err)
	}
	k := s.stepKeys(id, at.Step, at.Branch)
	if at.IsBranch() {
		if at.Step < 2 || at.Branch < 1 {
			return fail(errors.New("a branch's join is a step after its fan-out, and branches count from 1"))
		}
		k.spend = s.spendKey(id, at.Step)
	}
	snap, err := s.load(ctx, k, at.Step > 1)
	if err != nil {
		return fail(err)
	}
	return snap, nil
}

// keySet names the keys a worker reads for one step or branch; spend,
// the sum of a fan-out's branches, is read when set.
type keySet struct {
	run, cp, journal, failures, failureCount, prev, spend string
}

// stepKeys are the keys of step n (branch 0) or of branch i of the fan-out
// whose join is step n, whose checkpoints, journals and failures are
// named "<n>.<i>".
func (s *Store) stepKeys(id string, n, i int) keySet {
	suffix := ""
	if i > 0 {
		suffix = "." + strconv.Itoa(i)
	}
	return keySet{
		run: s.runKey(id), cp: s.cpKey(id, n) + suffix, journal: s.journalKey(id, n) + suffix,
		failures: s.failuresKey(id, n) + suffix, failureCount: s.failureCountKey(id, n) + suffix,
		prev: s.cpKey(id, n-1),
	}
}

// load reads the run and the keys of k in one script or transaction;
// withPrev reads the checkpoint before too.
func (s *Store) load(ctx context.Context, k keySet, withPrev bool) (checkpoint.Snapshot, error) {
	var res []any
	var err error
	if s.single {
		res, err = s.loadTx(ctx, k, withPrev)
	} else {
		keys := []string{k.run, k.cp, k.journal, k.failures}
		if withPrev || k.spend != "" {
			keys = append(keys, k.prev)
		}
		if k.spend != "" {
			keys = append(keys, k.spend)
		}
		res, err = s.batch.run(ctx, loadScript, keys).Slice()
	}
	if errors.Is(err, redis.Nil) {
		return checkpoint.Snapshot{}, checkpoint.ErrNotFound
	}
	if err != nil {
		return checkpoint.Snapshot{}, err
	}
	return decodeSnapshot(res)
}

// loadTx reads what loadScript reads as one MULTI/EXEC transaction of
// plain commands: the same consistent read, without the cost of a Lua
// call (about 10µs of Redis CPU each, the largest part of a step's).
// Its reply has loadScript's shape.
func (s *Store) loadTx(ctx context.Context, k keySet, withPrev bool) ([]any, error) {
	prev := []any{"EXISTS", k.prev} // a placeholder for step 1
	if withPrev {
		prev = []any{"GET", k.prev}
	}
	commands := [][]any{
		{"HMGET", k.run, "doc", "rev"},
		{"GET", k.cp},
		{"HGETALL", k.journal},
		prev,
		{"LRANGE", k.failures, 0, -1},
	}
	if k.spend != "" {
		commands = append(commands, []any{"GET", k.spend})
	}
	res, err := s.batch.tx(ctx, commands...).Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(commands) {
		return nil, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	run, ok := res[0].([]any)
	if !ok || len(run) != 2 {
		return nil, fmt.Errorf("unexpected run reply %T", res[0])
	}
	if run[0] == nil {
		return nil, redis.Nil
	}
	if !withPrev {
		res[3] = nil
	}
	return append([]any{run[0], run[1], res[1], flatten(res[2]), res[3]}, res[4:]...), nil
}

// flatten turns a RESP3 map reply (HGETALL) into the flat field, value
// array a RESP2 server or a script returns.
func flatten(v any) any {
	m, ok := v.(map[any]any)
	if !ok {
		return v
	}
	out := make([]any, 0, 2*len(m))
	for k, val := range m {
		out = append(out, k, val)
	}
	return out
}

func decodeSnapshot(res []any) (checkpoint.Snapshot, error) {
	if len(res) != 6 && len(res) != 7 {
		return checkpoint.Snapshot{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	var snap checkpoint.Snapshot
	var err error
	if snap.Run, err = decodeRun(res[0], res[1]); err != nil {
		return snap, err
	}
	if snap.Current, err = decodeOptionalCheckpoint(res[2]); err != nil {
		return snap, err
	}
	if snap.Previous, err = decodeOptionalCheckpoint(res[4]); err != nil {
		return snap, err
	}
	flat, ok := res[3].([]any)
	if !ok || len(flat)%2 != 0 {
		return snap, fmt.Errorf("unexpected journal reply %T", res[3])
	}
	for i := 1; i < len(flat); i += 2 {
		doc, _, err := str(flat[i])
		if err != nil {
			return snap, err
		}
		var rec checkpoint.CallRecord
		if err := unmarshal(doc, &rec); err != nil {
			return snap, err
		}
		snap.Journal = append(snap.Journal, rec)
	}
	sortJournal(snap.Journal)
	if snap.Failures, err = decodeFailures(res[5]); err != nil {
		return snap, err
	}
	if len(res) == 7 {
		if snap.BranchSpend, err = decodeSpend(res[6]); err != nil {
			return snap, err
		}
	}
	return snap, nil
}

// decodeSpend reads the sum of a fan-out's branches: 0 while absent.
func decodeSpend(v any) (float64, error) {
	doc, ok, err := str(v)
	if err != nil || !ok {
		return 0, err
	}
	spend, err := strconv.ParseFloat(doc, 64)
	if err != nil {
		return 0, fmt.Errorf("branch spend %q: %w", doc, err)
	}
	return spend, nil
}

func decodeFailures(v any) ([]checkpoint.Failure, error) {
	docs, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected failures reply %T", v)
	}
	var out []checkpoint.Failure
	for _, d := range docs {
		doc, _, err := str(d)
		if err != nil {
			return nil, err
		}
		var f checkpoint.Failure
		if err := unmarshal(doc, &f); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// sortJournal puts records in the order they were recorded; a hash has none.
func sortJournal(recs []checkpoint.CallRecord) {
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].At.Equal(recs[j].At) {
			return recs[i].At.Before(recs[j].At)
		}
		return recs[i].Name < recs[j].Name
	})
}

func decodeOptionalCheckpoint(v any) (*checkpoint.Checkpoint, error) {
	doc, ok, err := str(v)
	if err != nil || !ok {
		return nil, err
	}
	var cp checkpoint.Checkpoint
	if err := unmarshal(doc, &cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

// Checkpoint returns checkpoint n of run id, or ErrNotFound.
func (s *Store) Checkpoint(ctx context.Context, id string, n int) (checkpoint.Checkpoint, error) {
	if err := readID(id); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, err)
	}
	doc, err := s.rdb.Get(ctx, s.cpKey(id, n)).Result()
	if errors.Is(err, redis.Nil) {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, checkpoint.ErrNotFound)
	}
	if err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, err)
	}
	var cp checkpoint.Checkpoint
	if err := unmarshal(doc, &cp); err != nil {
		return checkpoint.Checkpoint{}, fmt.Errorf("get checkpoint %s:%d: %w", id, n, err)
	}
	return cp, nil
}

// Checkpoints returns all checkpoints of run id in step order, in one
// script: the highest committed step, then every step up to it (all keys
// share the run's slot). Steps missing below it are skipped.
func (s *Store) Checkpoints(ctx context.Context, id string) ([]checkpoint.Checkpoint, error) {
	if err := readID(id); err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	res, err := s.batch.run(ctx, checkpointsScript, []string{s.runKey(id)}, s.tag(id)+"cp:").Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list checkpoints %s: %w", id, checkpoint.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints %s: %w", id, err)
	}
	docs, ok := res.([]any)
	if !ok {
		return nil, fmt.Errorf("list checkpoints %s: unexpected reply %T", id, res)
	}
	out := make([]checkpoint.Checkpoint, 0, len(docs))
	for i, doc := range docs {
		cp, err := decodeOptionalCheckpoint(doc)
		if err != nil {
			return nil, fmt.Errorf("list checkpoints %s: step %d: %w", id, i+1, err)
		}
		if cp != nil {
			out = append(out, *cp)
		}
	}
	return out, nil
}

// RecordCall journals rec in the step or branch at, first writer wins by
// rec.Name, and returns the stored record.
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
	doc, err := marshal(rec)
	if err != nil {
		return fail(err)
	}
	stored, err := s.batch.run(ctx, recordScript, []string{s.stepKeys(id, at.Step, at.Branch).journal}, rec.Name, doc).Text()
	if err != nil {
		return fail(err)
	}
	var out checkpoint.CallRecord
	if err := unmarshal(stored, &out); err != nil {
		return fail(err)
	}
	return out, nil
}
