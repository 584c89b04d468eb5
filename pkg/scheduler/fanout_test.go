package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/steps"
)

type one struct {
	I int `json:"i"`
}

// seedFanOut stores run id at the join (step 2) of a fan-out of n
// branches of "one", with the branches in done committed at at, as a
// crash that lost every message would leave it.
func seedFanOut(t *testing.T, f *testfleet.Fleet, id string, n int, done []int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	old := time.Now().Add(-time.Hour)
	run, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "fanrep", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "split", CreatedAt: old, UpdatedAt: old})
	if err != nil {
		t.Fatal(err)
	}
	fan := &checkpoint.FanOut{}
	for i := 1; i <= n; i++ {
		fan.Branches = append(fan.Branches, checkpoint.Branch{Step: "one", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	next := run
	next.Step, next.StepName = 2, "sum"
	if _, err := f.Store.Commit(ctx, next, checkpoint.Checkpoint{RunID: id, Step: 1, Name: "split", State: json.RawMessage(`{}`), Next: "sum", Status: checkpoint.StatusRunning, FanOut: fan, At: old}); err != nil {
		t.Fatal(err)
	}
	for _, i := range done {
		cp := checkpoint.Checkpoint{RunID: id, Step: 2, Branch: i, Name: "one", State: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Status: checkpoint.StatusRunning, At: at}
		if _, err := f.Store.CommitBranch(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
}

// Acceptance (issue 15): the scheduler's stuck-run repair finishes a
// fan-out whose messages were lost: it publishes the branches that have
// no checkpoint, or the join nobody published; a fan-out whose branches
// still make progress is left alone.
func TestStuckFanOutRepaired(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			flow := steps.New[one]("fanrep", 1).
				Step("split", func(_ context.Context, _ *steps.Context, st one) (steps.Outcome[one], error) {
					return steps.Outcome[one]{}, fmt.Errorf("the fan-out is seeded by the test")
				}).
				Branch("one", steps.BranchFunc(func(_ context.Context, _ *steps.Context, in one) (one, error) { return in, nil })).
				Step("sum", func(_ context.Context, s *steps.Context, st one) (steps.Outcome[one], error) {
					outs, err := steps.BranchOutputs[one](s)
					if err != nil {
						return steps.Outcome[one]{}, err
					}
					for _, o := range outs {
						st.I += o.I
					}
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
			old := time.Now().Add(-time.Hour)
			seedFanOut(t, f, "lost-branch", 3, []int{1, 2}, old)
			seedFanOut(t, f, "lost-join", 3, []int{1, 2, 3}, old)
			seedFanOut(t, f, "busy", 3, []int{1}, time.Now())

			published, err := f.Client.Repair(context.Background(), f.Get("busy"), time.Now().Add(-time.Minute))
			if err != nil || published {
				t.Fatalf("repair of a fan-out whose branch committed just now: published %v (%v), want nothing", published, err)
			}
			f.StartScheduler(func(c *scheduler.Config) { c.StuckAfter = time.Minute; c.RepairInterval = 200 * time.Millisecond })
			for _, id := range []string{"lost-branch", "lost-join"} {
				done := f.WaitStatus(id, checkpoint.StatusCompleted, 30*time.Second)
				cps := f.Checkpoints(id)
				if len(cps) != 2 || string(cps[1].State) != `{"i":6}` {
					t.Fatalf("%s (%s): checkpoints %+v, want the join's sum 6", id, done.Status, cps)
				}
			}
			if run := f.Get("busy"); run.Status != checkpoint.StatusRunning || run.Step != 2 {
				t.Fatalf("busy fan-out: %s at %d", run.Status, run.Step)
			}
		})
	}
}
