package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
)

// A redrive of a parent that died because a child's input does not match
// the child workflow's schema is refused with the reason, and the parent
// stays dead: it must not wait for ever for a child that can't start. The
// child that never started reads as not started, not running (issue 23,
// item 7).
func TestRedriveParentWithBadChildInput(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			strict := steps.New[num]("strict", 1).
				InputSchema(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`).
				Step("only", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			parent := steps.New[num]("fussy", 1)
			end := parent.Ref("end")
			parent.
				Step("start", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.StartChildren(end, st,
						steps.Child{Workflow: "strict", Input: map[string]any{"n": 1}},
						steps.Child{Workflow: "strict", Input: map[string]any{"n": "two"}}), nil
				}).
				Step("end", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(strict, parent), nil)
			f.Start("fussy", "fussy-1", "")
			dead := f.WaitStatus("fussy-1", checkpoint.StatusDead, 20*time.Second)
			if !strings.Contains(dead.Error, "fussy-1-s1-2") || !strings.Contains(dead.Error, "schema") {
				t.Fatalf("dead reason %q, want the child and the schema named", dead.Error)
			}
			ctx := context.Background()
			_, err := f.Client.Redrive(ctx, "fussy-1", "oncall")
			if !errors.Is(err, client.ErrBadInput) || !strings.Contains(err.Error(), "fussy-1-s1-2") {
				t.Errorf("redrive: %v, want a refusal naming the child's bad input", err)
			}
			// Give a parent set waiting by mistake time to be seen so.
			time.Sleep(300 * time.Millisecond)
			now := f.Get("fussy-1")
			if now.Status != checkpoint.StatusDead || now.Redrives != 0 || now.Error != dead.Error {
				t.Fatalf("after the refused redrive: status %s, redrives %d, error %q; want dead as before, with %q", now.Status, now.Redrives, now.Error, dead.Error)
			}
			v, err := f.Client.Inspect(ctx, "fussy-1")
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Children) != 2 {
				t.Fatalf("children %+v, want 2", v.Children)
			}
			if c := v.Children[1]; c.Status == checkpoint.StatusRunning || !strings.Contains(c.Error, "not started") {
				t.Errorf("child never started reads as %q (%q), want not started", c.Status, c.Error)
			}
		})
	}
}

// A second StartChildren at a later step that gives a child the id of a
// child of the first batch does not take the first batch's ended child
// as its own: the child of the later step is not started (the id is
// taken) and reads failed, saying so (issue 23, item 8).
func TestLaterBatchSameChildID(t *testing.T) {
	type seen struct {
		Status checkpoint.Status `json:"status"`
		Error  string            `json:"error"`
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			leaf := steps.New[num]("leaf", 1).Step("only", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
				return steps.Complete(st), nil
			})
			parent := steps.New[seen]("twice", 1)
			second := parent.Ref("second")
			end := parent.Ref("end")
			parent.
				Step("first", func(_ context.Context, s *steps.Context, st seen) (steps.Outcome[seen], error) {
					return steps.StartChildren(second, st, steps.Child{Workflow: "leaf", ID: s.RunID() + "-kid", Input: num{N: 1}}), nil
				}).
				Step("second", func(_ context.Context, s *steps.Context, st seen) (steps.Outcome[seen], error) {
					return steps.StartChildren(end, st, steps.Child{Workflow: "leaf", ID: s.RunID() + "-kid", Input: num{N: 2}}), nil
				}).
				Step("end", func(_ context.Context, s *steps.Context, st seen) (steps.Outcome[seen], error) {
					res, err := steps.ChildResults(s)
					if err != nil || len(res) != 1 {
						return steps.Outcome[seen]{}, steps.Permanent(fmt.Errorf("child results %+v: %v", res, err))
					}
					st.Status, st.Error = res[0].Status, res[0].Error
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(leaf, parent), nil)
			f.Start("twice", "twice-1", "")
			f.WaitStatus("twice-1", checkpoint.StatusCompleted, 20*time.Second)
			cps := f.Checkpoints("twice-1")
			var got seen
			if err := json.Unmarshal(cps[len(cps)-1].State, &got); err != nil {
				t.Fatal(err)
			}
			if got.Status != checkpoint.StatusFailed || !strings.Contains(got.Error, "taken") {
				t.Fatalf("step 2's child twice-1-kid read as %s (%q): the child of step 1, want failed, its id taken", got.Status, got.Error)
			}
		})
	}
}

// A child of a workflow no worker registered is a permanent error: the
// parent goes dead with a reason naming the workflow, instead of its step
// being retried for ever in silence. Once a worker registers it, a
// redrive completes the parent (issue 23, item 9).
func TestUnregisteredChildWorkflow(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			parent := steps.New[num]("haunted", 1)
			end := parent.Ref("end")
			parent.
				Step("start", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.StartChildren(end, st, steps.Child{Workflow: "ghost"}), nil
				}).
				Step("end", func(_ context.Context, s *steps.Context, st num) (steps.Outcome[num], error) {
					res, err := steps.ChildResults(s)
					if err != nil || len(res) != 1 || res[0].Status != checkpoint.StatusCompleted {
						return steps.Outcome[num]{}, steps.Permanent(fmt.Errorf("child results %+v: %v", res, err))
					}
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(parent), nil)
			f.Start("haunted", "haunted-1", "")
			dead := f.WaitStatus("haunted-1", checkpoint.StatusDead, 15*time.Second)
			if !strings.Contains(dead.Error, `"ghost"`) || !strings.Contains(dead.Error, "unknown workflow") {
				t.Fatalf("dead reason %q, want the unknown workflow named", dead.Error)
			}
			ctx := context.Background()
			if _, err := f.Client.Redrive(ctx, "haunted-1", "oncall"); !errors.Is(err, client.ErrUnknownWorkflow) {
				t.Errorf("redrive before ghost is registered: %v, want ErrUnknownWorkflow", err)
			}
			ghost := steps.New[num]("ghost", 1).Step("only", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
				return steps.Complete(st), nil
			})
			f.StartWorker(steps.NewRegistry().MustRegister(ghost), nil)
			testenv.WaitWorkflows(t, f.Store, 10*time.Second, "ghost")
			if _, err := f.Client.Redrive(ctx, "haunted-1", "oncall"); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("haunted-1", checkpoint.StatusCompleted, 20*time.Second)
		})
	}
}

// A step that started child runs, delivered again after the children
// ended and resumed the run (its worker died before the ack, or an
// operator replayed the stream), publishes nothing: the children's
// resume published the next step. It used to publish the next step
// under its regular id, which nobody had sent, so that step ran twice at
// once. transition.Follow owes a step message only for a commit that
// moved the run on by itself.
func TestLateRedeliveryAfterChildrenRunsTheNextStepOnce(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			kid := steps.New[num]("kid", 1).
				Step("only", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.Complete(st), nil
				})
			var entered atomic.Int32
			release := make(chan struct{})
			parent := steps.New[num]("mother", 1)
			after := parent.Ref("after")
			parent.
				Step("start", func(_ context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					return steps.StartChildren(after, st, steps.Child{Workflow: "kid"}), nil
				}).
				Step("after", func(ctx context.Context, _ *steps.Context, st num) (steps.Outcome[num], error) {
					entered.Add(1)
					select {
					case <-release:
					case <-ctx.Done():
						return steps.Outcome[num]{}, ctx.Err()
					}
					return steps.Complete(st), nil
				})
			w, _ := f.StartWorker(steps.NewRegistry().MustRegister(kid, parent), nil)
			f.Start("mother", "mother-1", "")
			testenv.Eventually(t, 20*time.Second, "step 2 entered after the child ended", func() bool { return entered.Load() == 1 })
			// Step 1's message again, as a redelivery or a replay brings it.
			msg, err := queue.StepMessage(queue.StepMsg{RunID: "mother-1", Workflow: "mother", Step: 1, Name: "start"}, "replay-mother-1")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.JS.PublishMsg(context.Background(), msg); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 20*time.Second, "the replay handled", func() bool { return w.Stats().Replayed >= 1 })
			// A step 2 published by the replay would be taken within
			// milliseconds by the idle slots of the worker.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if n, s := entered.Load(), w.Stats(); n != 1 || s.Republished != 0 {
					t.Fatalf("after the late delivery of step 1: step 2 entered %d times, %d next steps republished; want once and none", n, s.Republished)
				}
				time.Sleep(20 * time.Millisecond)
			}
			close(release)
			f.WaitStatus("mother-1", checkpoint.StatusCompleted, 20*time.Second)
		})
	}
}
