package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
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
			flow := steps.New[one]("fanrep", 1)
			branch := steps.AddBranch(flow, "one", func(_ context.Context, _ *steps.Context, in one) (one, error) { return in, nil })
			flow.
				Step("split", func(_ context.Context, _ *steps.Context, st one) (steps.Outcome[one], error) {
					return steps.Outcome[one]{}, fmt.Errorf("the fan-out is seeded by the test")
				}).
				Step("sum", func(_ context.Context, s *steps.Context, st one) (steps.Outcome[one], error) {
					outs, err := branch.Outputs(s)
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
			f.StartScheduler(func(c *scheduler.Config) {
				c.StuckAfter, c.StepTimeout = time.Minute, time.Second
				c.RepairInterval = 200 * time.Millisecond
			})
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

// Acceptance (issue 15): a parent whose children all ended but whose
// resume was lost (its last child's worker died between the child's end
// and the parent's resume) is resumed by the scheduler's repair, and its
// next step reads how the children ended.
func TestParentOfEndedChildrenResumed(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ctx := context.Background()
			flow := steps.New[one]("parent", 1).
				Step("start", func(_ context.Context, _ *steps.Context, st one) (steps.Outcome[one], error) {
					return steps.Outcome[one]{}, fmt.Errorf("the children are seeded by the test")
				}).
				Step("collect", func(_ context.Context, s *steps.Context, st one) (steps.Outcome[one], error) {
					results, err := steps.ChildResults(s)
					if err != nil {
						return steps.Outcome[one]{}, err
					}
					for _, r := range results {
						var c one
						if r.Status == checkpoint.StatusCompleted && json.Unmarshal(r.State, &c) == nil {
							st.I += c.I
						}
					}
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
			old := time.Now().Add(-time.Hour)
			run, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: "p-1", Workflow: "parent", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "start", CreatedAt: old, UpdatedAt: old})
			if err != nil {
				t.Fatal(err)
			}
			children := []checkpoint.Child{{ID: "p-1-1", Workflow: "child"}, {ID: "p-1-2", Workflow: "child"}, {ID: "p-1-3", Workflow: "child"}}
			next := run
			next.Status, next.Step, next.StepName = checkpoint.StatusWaiting, 2, "collect"
			next.Wait = &checkpoint.Wait{Kind: checkpoint.WaitChildren, Step: 2, StepName: "collect", Since: old}
			if _, err := f.Store.Commit(ctx, next, checkpoint.Checkpoint{RunID: "p-1", Step: 1, Name: "start", State: json.RawMessage(`{}`), Next: "collect", Status: checkpoint.StatusWaiting, Children: children, At: old}); err != nil {
				t.Fatal(err)
			}
			for i, ch := range children {
				status := checkpoint.StatusCompleted
				if i == 2 {
					status = checkpoint.StatusCancelled
				}
				c, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: ch.ID, Workflow: "child", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "only", CreatedAt: old, UpdatedAt: old, Parent: &checkpoint.ParentRef{RunID: "p-1", Step: 1}})
				if err != nil {
					t.Fatal(err)
				}
				c.Status = status
				if _, err := f.Store.Commit(ctx, c, checkpoint.Checkpoint{RunID: ch.ID, Step: 1, Name: "only", State: json.RawMessage(fmt.Sprintf(`{"i":%d}`, 10*(i+1))), Status: status, At: old}); err != nil {
					t.Fatal(err)
				}
			}
			f.StartScheduler(func(c *scheduler.Config) {
				c.StuckAfter, c.StepTimeout = time.Minute, time.Second
				c.RepairInterval = 200 * time.Millisecond
			})
			done := f.WaitStatus("p-1", checkpoint.StatusCompleted, 30*time.Second)
			if cps := f.Checkpoints("p-1"); len(cps) != 2 || string(cps[1].State) != `{"i":30}` {
				t.Fatalf("parent (%s) checkpoints %+v: want the completed children's sum 30", done.Status, cps)
			}
		})
	}
}

// A parent that died waiting for its children (a child it could not
// start), redriven, waits for them again: it starts those that do not
// exist and its next step runs only once all have ended (found by review).
func TestRedriveParentWaitsForChildrenAgain(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ctx := context.Background()
			var ranEarly atomic.Bool
			child := steps.New[one]("kid", 1).Step("only", func(_ context.Context, _ *steps.Context, st one) (steps.Outcome[one], error) {
				return steps.Complete(st), nil
			})
			flow := steps.New[one]("parent2", 1).
				Step("start", func(_ context.Context, _ *steps.Context, st one) (steps.Outcome[one], error) {
					return steps.Outcome[one]{}, fmt.Errorf("seeded by the test")
				}).
				Step("collect", func(_ context.Context, s *steps.Context, st one) (steps.Outcome[one], error) {
					results, _ := steps.ChildResults(s)
					for _, r := range results {
						if !r.Status.Terminal() {
							ranEarly.Store(true)
						}
					}
					st.I = len(results)
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(child, flow), nil)
			now := time.Now().UTC()
			run, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: "p-2", Workflow: "parent2", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "start", CreatedAt: now, UpdatedAt: now})
			if err != nil {
				t.Fatal(err)
			}
			kids := []checkpoint.Child{{ID: "p-2-1", Workflow: "kid", Input: json.RawMessage(`{}`)}, {ID: "p-2-2", Workflow: "kid", Input: json.RawMessage(`{}`)}}
			next := run
			next.Status, next.Step, next.StepName, next.Error = checkpoint.StatusDead, 2, "collect", "a child could not be started"
			if _, err := f.Store.Commit(ctx, next, checkpoint.Checkpoint{RunID: "p-2", Step: 1, Name: "start", State: json.RawMessage(`{}`), Next: "collect", Status: checkpoint.StatusWaiting, Children: kids, At: now}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Client.Redrive(ctx, "p-2", "oncall"); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("p-2", checkpoint.StatusCompleted, 30*time.Second)
			for _, id := range []string{"p-2-1", "p-2-2"} {
				if c := f.Get(id); c.Status != checkpoint.StatusCompleted || c.Parent == nil || c.Parent.RunID != "p-2" {
					t.Fatalf("%s: %s, parent %+v", id, c.Status, c.Parent)
				}
			}
			if ranEarly.Load() {
				t.Fatal("the step after the children ran while a child was still running")
			}
			if cps := f.Checkpoints("p-2"); len(cps) != 2 || string(cps[1].State) != `{"i":2}` {
				t.Fatalf("checkpoints %+v", cps)
			}
		})
	}
}
