package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// spendFan fans out st.Branches branches of "cost" after "split" spent
// splitSpend; each branch spends 1 and counts its body's runs in bodies;
// the join "sum" spends nothing and completes.
func spendFan(name string, caps steps.Caps, splitSpend float64, bodies *atomic.Int64) *steps.Workflow[fanState] {
	w := steps.New[fanState](name, 1).WithCaps(caps)
	sum := w.Ref("sum")
	cost := steps.AddBranch(w, "cost", func(_ context.Context, s *steps.Context, in payIn) (payOut, error) {
		bodies.Add(1)
		time.Sleep(20 * time.Millisecond) // a model call, long enough for branches to overlap
		s.Spend(1)
		return payOut{Amount: in.I}, nil
	})
	return w.
		Step("split", func(_ context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
			s.Spend(splitSpend)
			var bs []steps.Branch
			for i := 1; i <= st.Branches; i++ {
				bs = append(bs, cost.With(payIn{I: i}))
			}
			return steps.FanOut(sum, st, bs...), nil
		}).
		Step("sum", func(_ context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
			outs, err := cost.Outputs(s)
			if err != nil {
				return steps.Outcome[fanState]{}, err
			}
			st.Total = len(outs)
			return steps.Complete(st), nil
		})
}

// Issue 23 item 11: what a fan-out's branches spend counts against the
// run's max-spend cap as each branch commits, not only at the join. With
// a cap of 5, 2 spent before the fan-out and 20 branches of 1 each, the
// branches stop once the committed spend reaches the cap (at most the cap's
// room plus the branches in flight run) and the run goes to the dead
// letters naming the cap. Under the cap, the join counts every branch's
// spend once.
func TestFanOutSpendCap(t *testing.T) {
	const concurrency = 4
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var over, under atomic.Int64
			reg := steps.NewRegistry().MustRegister(
				spendFan("capfan", steps.Caps{MaxSpend: 5}, 2, &over),
				spendFan("roomyfan", steps.Caps{MaxSpend: 100}, 2, &under),
			)
			f := testfleet.New(t, kind)
			f.StartWorker(reg, func(c *worker.Config) { c.Concurrency = concurrency })

			f.Start("capfan", "capfan-1", `{"branches": 20}`)
			var run checkpoint.Run
			testenv.Eventually(t, 60*time.Second, "capfan-1 ended", func() bool {
				r, err := f.Store.GetRun(context.Background(), "capfan-1")
				run = r
				return err == nil && r.Status.Terminal()
			})
			f.WaitDrained("capfan", 30*time.Second)
			if run.Status != checkpoint.StatusDead || !strings.Contains(run.Error, "max spend") {
				t.Errorf("run %s after 20 branches of spend 1 under a cap of 5: status %s (%q), want dead naming max spend", run.ID, run.Status, run.Error)
			}
			t.Logf("%d branch bodies ran before the cap stopped the fan-out: %s", over.Load(), run.Error)
			if n := over.Load(); n > 3+concurrency {
				t.Errorf("%d branch bodies ran, want at most %d: the cap's room (3) plus the branches in flight (%d)", n, 3+concurrency, concurrency)
			}
			if run.Spend != 2 {
				t.Errorf("run spend %v after dying in the fan-out, want 2 (branches count at the join only)", run.Spend)
			}

			f.Start("roomyfan", "roomyfan-1", `{"branches": 20}`)
			done := f.WaitStatus("roomyfan-1", checkpoint.StatusCompleted, 60*time.Second)
			if done.Spend != 22 || under.Load() != 20 {
				t.Errorf("under the cap: spend %v with %d branch bodies run, want 22 (2 + 20 branches, each once) and 20", done.Spend, under.Load())
			}
		})
	}
}

// previousBranchScript is redisstore's branch commit script before
// branches' spend was summed (the fan-out's spend key did not exist).
var previousBranchScript = redis.NewScript(`
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
end
if result then redis.call('SETBIT', KEYS[3], ARGV[2], 1) end
return {wrote, redis.call('BITCOUNT', KEYS[3])}
`)

// commitBranchAsPrevious stores cp, a branch's result, as the store's
// code did before it summed what branches spent.
func commitBranchAsPrevious(t *testing.T, f *testfleet.Fleet, cp checkpoint.Checkpoint) {
	t.Helper()
	ctx := context.Background()
	doc, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if f.Redis != nil {
		tag := f.RedisPrefix + ":{" + cp.RunID + "}:"
		keys := []string{tag + "run", fmt.Sprintf("%scp:%d.%d", tag, cp.Step, cp.Branch), fmt.Sprintf("%scp:%d:bits", tag, cp.Step)}
		if err := previousBranchScript.Run(ctx, f.Redis, keys, doc, cp.Branch, 1, cp.Redrives).Err(); err != nil {
			t.Fatal(err)
		}
		return
	}
	kv, err := f.JS.KeyValue(ctx, "durable")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, fmt.Sprintf("cp.%s.%d.%d", cp.RunID, cp.Step, cp.Branch), doc); err != nil {
		t.Fatal(err)
	}
}

// Upgrade (issue 23 item 11): a fan-out half committed by the code from
// before branches' spend was summed (no sum key) is finished by this code:
// the remaining branches run once each, the join runs, and the run's spend
// counts every branch once, those the previous code committed included.
func TestFanOutSpendWrittenByPreviousCode(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var bodies atomic.Int64
			f := testfleet.New(t, kind)
			s := f.Store
			const id, total = "spend-old", 6
			run, err := s.CreateRun(ctx, checkpoint.Run{
				ID: id, Workflow: "spendfan", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "split",
				Input: json.RawMessage(`{"branches":6}`), CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC(),
			})
			if err != nil {
				t.Fatal(err)
			}
			fan := checkpoint.Checkpoint{RunID: id, Step: 1, Name: "split", State: json.RawMessage(`{"branches":6,"total":0,"keys":null}`),
				Next: "sum", Status: checkpoint.StatusRunning, Attempt: 1, At: time.Now().UTC(), Spend: 2, FanOut: &checkpoint.FanOut{}}
			for i := 1; i <= total; i++ {
				fan.FanOut.Branches = append(fan.FanOut.Branches, checkpoint.Branch{Step: "cost", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			}
			run.Step, run.StepName, run.Steps, run.Spend = 2, "sum", 1, 2
			if run, err = s.Commit(ctx, run, fan); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				commitBranchAsPrevious(t, f, checkpoint.Checkpoint{RunID: id, Step: 2, Branch: i, Name: "cost",
					State: json.RawMessage(fmt.Sprintf(`{"key":"","amount":%d}`, i)), Status: checkpoint.StatusRunning,
					Attempt: 1, At: time.Now().UTC(), Spend: 1})
			}
			f.StartWorker(steps.NewRegistry().MustRegister(spendFan("spendfan", steps.Caps{MaxSpend: 100}, 2, &bodies)), nil)
			// The deliveries of branches 4 to 6 still queued, and a replay
			// of branch 1's.
			for _, i := range []int{4, 5, 6, 1} {
				if _, err := queue.PublishStep(ctx, f.JS, queue.BranchStep(run, 2, i, "cost"), fmt.Sprintf("%s:old", queue.BranchMsgID(id, 2, i))); err != nil {
					t.Fatal(err)
				}
			}
			done := f.WaitStatus(id, checkpoint.StatusCompleted, 30*time.Second)
			f.WaitDrained("spendfan", 30*time.Second)
			if done.Spend != 2+total || bodies.Load() != 3 {
				t.Fatalf("run spend %v with %d branch bodies run, want %d (2 + every branch once) and 3 (branches 4 to 6)", done.Spend, bodies.Load(), 2+total)
			}
			var st fanState
			cps := f.Checkpoints(id)
			if err := json.Unmarshal(cps[len(cps)-1].State, &st); err != nil || st.Total != total {
				t.Fatalf("join state %+v (%v): want the outputs of all %d branches", st, err, total)
			}
		})
	}
}
