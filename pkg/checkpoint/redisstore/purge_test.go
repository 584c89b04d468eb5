package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
)

// prevCreateScript is createScript as the release before the run hash
// listed its fan-outs had it, verbatim: a run it created has no field fo.
var prevCreateScript = redis.NewScript(redisstore.IndexLua + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HMGET', KEYS[1], 'doc', 'rev', 'tomb')
end
redis.call('HSET', KEYS[1], 'doc', ARGV[1], 'rev', 1, 'last_cp', 0)
local old = indexing()(KEYS[1], false, 2)
if old then return {1, old} end
return 1
`)

// purgeCase is a run to purge: steps committed, the branches of the
// fan-outs some of them made (by step), whether those branches ran, and
// how the run ended.
type purgeCase struct {
	name     string
	steps    int
	fanOuts  map[int]int
	branches bool
	end      checkpoint.Status
}

var purgeCases = []purgeCase{
	{name: "one fan-out", steps: 4, fanOuts: map[int]int{2: 3}, branches: true, end: checkpoint.StatusCompleted},
	{name: "two fan-outs", steps: 6, fanOuts: map[int]int{1: 2, 4: 3}, branches: true, end: checkpoint.StatusCompleted},
	{name: "fan-out cancelled before its branches ran", steps: 2, fanOuts: map[int]int{2: 4}, end: checkpoint.StatusCancelled},
}

// A purge deletes every key of a run with fan-outs, its branches' too,
// and leaves only the tombstone, whichever release created the run: one
// the previous release created (its fan-outs not listed in the run hash,
// so the purge reads its checkpoints to find them) and one this release
// created, whose purge reads no checkpoint (no MGET).
func TestPurgeRunWithFanOuts(t *testing.T) {
	client := startClient(t)
	for _, created := range []string{"previous", "current"} {
		for i, c := range purgeCases {
			t.Run(created+" release/"+c.name, func(t *testing.T) {
				ctx := testCtx(t)
				prefix := uniquePrefix()
				s := redisstore.New(client, redisstore.Options{Prefix: prefix})
				run := checkpoint.Run{ID: "fan-" + strconv.Itoa(i), Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1, StepName: "s1"}
				if created == "previous" {
					run = prevCreateRun(t, ctx, client, s, prefix, run)
				} else {
					var err error
					if run, err = s.CreateRun(ctx, run); err != nil {
						t.Fatal(err)
					}
				}
				run = fillPurgeCase(t, ctx, s, run, c)
				runKeys := func() []string { return scanKeys(t, ctx, client, prefix+":{"+run.ID+"}*") }
				if before := runKeys(); len(before) < 4*c.steps+1 {
					t.Fatalf("before the purge: %d keys %v, want the run's keys of every kind", len(before), before)
				}
				mgets, _ := testenv.RedisCommandStat(t, client, "mget")
				if err := s.Purge(ctx, run, time.Hour); err != nil {
					t.Fatal(err)
				}
				after, _ := testenv.RedisCommandStat(t, client, "mget")
				mgets = after - mgets
				if keys := runKeys(); len(keys) != 1 || keys[0] != prefix+":{"+run.ID+"}:run" {
					t.Errorf("after the purge: keys %v, want the tombstone alone", keys)
				}
				if fields, err := client.HKeys(ctx, prefix+":{"+run.ID+"}:run").Result(); err != nil || len(fields) != 1 || fields[0] != "tomb" {
					t.Errorf("tombstone fields %v, %v; want tomb alone", fields, err)
				}
				if err := s.Purge(ctx, run, time.Hour); !errors.Is(err, checkpoint.ErrNotFound) {
					t.Errorf("second purge = %v, want ErrNotFound", err)
				}
				switch {
				case created == "previous" && mgets == 0:
					t.Errorf("the purge of a run the previous release created read no checkpoint: how did it find the fan-outs?")
				case created == "current" && mgets != 0:
					t.Errorf("the purge ran %d MGETs: it read checkpoints, which the run hash's list of fan-outs spares", mgets)
				}
			})
		}
	}
}

// prevCreateRun creates run as the previous release did (prevCreateScript),
// indexed as CreateRun indexes it.
func prevCreateRun(t *testing.T, ctx context.Context, client *redis.Client, s *redisstore.Store, prefix string, run checkpoint.Run) checkpoint.Run {
	t.Helper()
	run.CreatedAt = time.Now().UTC()
	run.UpdatedAt = run.CreatedAt
	doc, err := json.Marshal(run)
	if err != nil {
		t.Fatal(err)
	}
	key := prefix + ":{" + run.ID + "}:run"
	if n, err := prevCreateScript.Run(ctx, client, []string{key}, s.IndexArgs([]any{string(doc)}, run)...).Int64(); err != nil || n != 1 {
		t.Fatalf("previous create = %d, %v; want 1", n, err)
	}
	run.Rev = 1
	return run
}

// fillPurgeCase commits c's steps to run through s, each with a journal
// and a failure, its fan-outs' branches each with theirs, and ends it.
func fillPurgeCase(t *testing.T, ctx context.Context, s *redisstore.Store, run checkpoint.Run, c purgeCase) checkpoint.Run {
	t.Helper()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for n := 1; n <= c.steps; n++ {
		must(s.RecordCall(ctx, run.ID, checkpoint.AtStep(n), checkpoint.CallRecord{Name: "model"}))
		must(s.RecordFailure(ctx, run.ID, checkpoint.AtStep(n), checkpoint.Failure{Attempt: 1, Error: "flaky"}))
		cp := checkpoint.Checkpoint{Step: n, Name: "s" + strconv.Itoa(n), State: []byte(`{}`), Status: checkpoint.StatusRunning}
		if b := c.fanOuts[n]; b > 0 {
			cp.FanOut = &checkpoint.FanOut{}
			for range b {
				cp.FanOut.Branches = append(cp.FanOut.Branches, checkpoint.Branch{Step: "check"})
			}
		}
		run.Step, run.StepName = n+1, "s"+strconv.Itoa(n+1)
		if n == c.steps && c.end == checkpoint.StatusCompleted {
			run.Step, run.Status, cp.Status = n, c.end, c.end
		}
		var err error
		if run, err = s.Commit(ctx, run, cp); err != nil {
			t.Fatal(err)
		}
		for i := 1; c.branches && i <= c.fanOuts[n]; i++ {
			must(s.RecordCall(ctx, run.ID, checkpoint.AtBranch(n+1, i), checkpoint.CallRecord{Name: "fetch"}))
			must(s.RecordFailure(ctx, run.ID, checkpoint.AtBranch(n+1, i), checkpoint.Failure{Attempt: 1, Error: "flaky"}))
			must(s.CommitBranch(ctx, checkpoint.Checkpoint{RunID: run.ID, Step: n + 1, Branch: i, Of: c.fanOuts[n], State: []byte(`{}`), Spend: 0.25}))
		}
	}
	if err := s.MarkAlive(ctx, run.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if run.Status != c.end {
		run.Status = c.end
		var err error
		if run, err = s.UpdateRun(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	return run
}

// scanKeys lists the keys matching pattern with SCAN.
func scanKeys(t *testing.T, ctx context.Context, client *redis.Client, pattern string) []string {
	t.Helper()
	var keys []string
	iter := client.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}
