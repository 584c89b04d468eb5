package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

type num struct {
	N int `json:"n"`
}

// A cancel of the parent that lands after the step that starts children
// committed, before the children exist, still cancels them: none runs to
// completion for a cancelled parent (found by review).
func TestCancelRacesStartChildren(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			leaf := steps.New[num]("leaf", 1).Step("only", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
				time.Sleep(200 * time.Millisecond) // long enough for the cancel to reach a child in flight
				return steps.Complete(st), nil
			})
			parent := steps.New[num]("par", 1)
			end := parent.Ref("end")
			parent.
				Step("start", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.StartChildren(end, st, steps.Child{Workflow: "leaf"}, steps.Child{Workflow: "leaf"}), nil
				}).
				Step("end", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(leaf, parent), func(c *worker.Config) {
				c.Hooks = append(c.Hooks, worker.HookFunc(func(ctx context.Context, b worker.Boundary, d worker.Delivery) {
					if b == worker.AfterCheckpoint && d.RunID == "p1" && d.Step == 1 {
						if _, err := f.Client.Cancel(ctx, "p1", "op"); err != nil {
							t.Errorf("cancel: %v", err)
						}
					}
				}))
			})
			f.Start("par", "p1", "")
			f.WaitStatus("p1", checkpoint.StatusCancelled, 20*time.Second)
			for _, id := range []string{"p1-s1-1", "p1-s1-2"} {
				testenv.Eventually(t, 10*time.Second, id+" cancelled", func() bool {
					c, err := f.Store.GetRun(context.Background(), id)
					return errors.Is(err, checkpoint.ErrNotFound) || (err == nil && c.Status == checkpoint.StatusCancelled)
				})
			}
		})
	}
}

// A second delivery of a branch that fails for good after the first one
// committed the branch does not send the run to the dead letters (found by
// review): the run completes.
func TestDuplicateBranchFailureAfterCommit(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			var bodies, arrivals atomic.Int32
			bArrived := make(chan struct{})
			wf := steps.New[num]("dupfan", 1)
			join := wf.Ref("join")
			leaf := steps.AddBranch(wf, "leaf", func(_ context.Context, s *steps.Context, i int) (int, error) {
				if i == 2 {
					// Branch 2 holds the join back until the duplicate
					// of branch 1 has failed.
					for deadline := time.Now().Add(10 * time.Second); bodies.Load() < 2 && time.Now().Before(deadline); {
						time.Sleep(10 * time.Millisecond)
					}
					time.Sleep(200 * time.Millisecond)
					return i, nil
				}
				if bodies.Add(1) == 1 {
					return i, nil
				}
				return 0, steps.Permanent(errors.New("duplicate refused"))
			})
			wf.
				Step("split", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.FanOut(join, st, leaf.With(1), leaf.With(2)), nil
				}).
				Step("join", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) {
				c.Concurrency = 8
				c.Hooks = append(c.Hooks, worker.HookFunc(func(ctx context.Context, b worker.Boundary, d worker.Delivery) {
					if b != worker.BeforeStep || d.RunID != "f1" || d.Branch != 1 {
						return
					}
					if arrivals.Add(1) == 1 {
						// A duplicate of branch 1 (a replay, a repair) arrives
						// while the first delivery is about to run.
						if _, err := queue.PublishStep(ctx, f.JS, queue.BranchStep(checkpoint.Run{ID: "f1", Workflow: "dupfan"}, 2, 1, "leaf"), "f1:2.1:dup"); err != nil {
							t.Error(err)
						}
						<-bArrived
						return
					}
					close(bArrived)
					// The duplicate runs its body once the first committed.
					testenv.Eventually(t, 10*time.Second, "branch 1 committed", func() bool {
						cps, _ := f.Store.BranchCheckpoints(ctx, "f1", 2, 2)
						for _, cp := range cps {
							if cp.Branch == 1 {
								return true
							}
						}
						return false
					})
				}))
			})
			f.Start("dupfan", "f1", "")
			f.WaitStatus("f1", checkpoint.StatusCompleted, 30*time.Second)
			if bodies.Load() != 2 {
				t.Fatalf("branch 1 ran %d times, want 2 (the duplicate ran and failed)", bodies.Load())
			}
		})
	}
}

// Issue 23 item 5: delivery A of a branch fails for good and marks the run
// dead while delivery B of the same branch (a replay, a repair) is in its
// body; B then finishes. The branch has one outcome, the first stored on
// its own key: the run is either dead with its dead letter, and a redrive
// completes it, or completed without one; never running with no message
// and a false dead letter.
func TestBranchDeadMarkRacesCommit(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ctx := context.Background()
			var calls atomic.Int32
			bEntered, aMarked := make(chan struct{}), make(chan struct{})
			var markOnce sync.Once
			letters := func() int {
				dls, err := f.Client.DeadLetters(ctx)
				if err != nil {
					t.Error(err)
				}
				n := 0
				for _, dl := range dls {
					if dl.RunID == "f5" {
						n++
					}
				}
				return n
			}
			wf := steps.New[num]("deadrace", 1)
			join := wf.Ref("join")
			leaf := steps.AddBranch(wf, "leaf", func(ctx context.Context, _ *steps.Context, i int) (int, error) {
				switch calls.Add(1) {
				case 1: // A: a duplicate B starts; A fails for good while B runs.
					if _, err := queue.PublishStep(ctx, f.JS, queue.BranchStep(checkpoint.Run{ID: "f5", Workflow: "deadrace"}, 2, 1, "leaf"), "f5:2.1:dup"); err != nil {
						t.Error(err)
					}
					waitChan(t, bEntered, "B in its body")
					return 0, steps.Permanent(errors.New("ledger refused"))
				case 2: // B: succeeds once A has marked the run dead.
					close(bEntered)
					waitChan(t, aMarked, "A marked the run dead")
					return i, nil
				}
				return i, nil // after the redrive
			})
			wf.
				Step("split", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.FanOut(join, st, leaf.With(1)), nil
				}).
				Step("join", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) {
				c.Concurrency = 8
				c.Hooks = append(c.Hooks, worker.HookFunc(func(ctx context.Context, b worker.Boundary, d worker.Delivery) {
					if b != worker.DeadMarked || d.RunID != "f5" || d.Branch != 1 {
						return
					}
					markOnce.Do(func() {
						close(aMarked)
						// A goes on once B's outcome reached the dead letters
						// (B's own, or the join's that B published).
						testenv.Eventually(t, 10*time.Second, "a dead letter after B", func() bool { return letters() > 0 })
					})
				}))
			})
			f.Start("deadrace", "f5", "")
			var run checkpoint.Run
			testenv.Eventually(t, 20*time.Second, "f5 settled", func() bool {
				var err error
				run, err = f.Store.GetRun(ctx, "f5")
				return err == nil && run.Status.Terminal()
			})
			// Let A finish whatever it does after its hook.
			time.Sleep(500 * time.Millisecond)
			run, err := f.Store.GetRun(ctx, "f5")
			if err != nil {
				t.Fatal(err)
			}
			switch n := letters(); {
			case run.Status == checkpoint.StatusCompleted && n == 0:
				return
			case run.Status != checkpoint.StatusDead || n != 1:
				t.Fatalf("run %s at step %d (%q) with %d dead letter(s): want dead with one letter, or completed with none", run.Status, run.Step, run.Error, n)
			}
			if run.FailedBranch != 1 || !strings.Contains(run.Error, "ledger refused") {
				t.Fatalf("dead run: failed branch %d, error %q", run.FailedBranch, run.Error)
			}
			if _, err := f.Client.Redrive(ctx, "f5", "oncall"); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("f5", checkpoint.StatusCompleted, 20*time.Second)
		})
	}
}

func waitChan(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Errorf("timed out waiting for %s", what)
	}
}
