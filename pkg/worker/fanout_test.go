package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
)

type fanState struct {
	Branches int      `json:"branches"`
	Total    int      `json:"total"`
	Keys     []string `json:"keys"`
}

type payIn struct {
	I int `json:"i"`
}

type payOut struct {
	Key    string `json:"key"`
	Amount int    `json:"amount"`
}

// fanWorkflow fans out st.Branches branches of "pay", each paying i with
// its own key through pay, then runs after (when set) and sums them in
// "sum", calling onJoin.
func fanWorkflow(pay func(in payIn, key string) payOut, after func(in payIn) error, onJoin func()) *steps.Workflow[fanState] {
	w := steps.New[fanState]("fan", 1)
	sum := w.Ref("sum")
	payBranch := steps.AddBranch(w, "pay", func(ctx context.Context, s *steps.Context, in payIn) (payOut, error) {
		out, err := steps.Effect(ctx, s, "pay", in, func(ctx context.Context, key string) (payOut, error) {
			return pay(in, key), nil
		})
		if err == nil && after != nil {
			err = after(in)
		}
		return out, err
	}, steps.WithRetry(steps.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond}))
	return w.
		Step("split", func(ctx context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
			var bs []steps.Branch
			for i := 1; i <= st.Branches; i++ {
				bs = append(bs, payBranch.With(payIn{I: i}))
			}
			return steps.FanOut(sum, st, bs...), nil
		}).
		Step("sum", func(ctx context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
			outs, err := payBranch.Outputs(s)
			if err != nil {
				return steps.Outcome[fanState]{}, err
			}
			if onJoin != nil {
				onJoin()
			}
			for _, o := range outs {
				st.Total += o.Amount
				st.Keys = append(st.Keys, o.Key)
			}
			return steps.Complete(st), nil
		})
}

// payments counts the effects made per key.
type payments struct {
	mu    sync.Mutex
	calls map[string]int
}

func (p *payments) pay(in payIn, key string) payOut {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[key]++
	return payOut{Key: key, Amount: in.I}
}

// check fails unless exactly n keys were paid, each once.
func (p *payments) check(t *testing.T, n int) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var twice []string
	for k, c := range p.calls {
		if c != 1 {
			twice = append(twice, fmt.Sprintf("%s ×%d", k, c))
		}
	}
	if len(twice) > 0 || len(p.calls) != n {
		t.Fatalf("%d keys paid, want %d; paid more than once: %v", len(p.calls), n, twice)
	}
}

// Acceptance (issue 15): a fan-out's branches run in parallel on two
// workers, each checkpointed with its own key; the join runs once with
// their outputs in branch order; a branch that fails after its effect is
// retried without paying again; a replay of every step message changes
// nothing.
func TestFanOutJoin(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			const n = 60
			var p payments
			var joins atomic.Int64
			var failed atomic.Bool
			after := func(in payIn) error {
				if in.I == 7 && failed.CompareAndSwap(false, true) {
					return errors.New("ledger hiccup after the payment")
				}
				return nil
			}
			reg := steps.NewRegistry().MustRegister(fanWorkflow(p.pay, after, func() { joins.Add(1) }))
			f := testfleet.New(t, kind)
			f.StartWorker(reg, nil)
			f.StartWorker(reg, nil)
			f.Start("fan", "fan-1", fmt.Sprintf(`{"branches": %d}`, n))
			f.WaitStatus("fan-1", checkpoint.StatusCompleted, 60*time.Second)
			checkFanRun(t, f, "fan-1", n)
			p.check(t, n)
			if !failed.Load() || joins.Load() != 1 {
				t.Fatalf("branch 7 failed: %v; the join ran %d times, want once", failed.Load(), joins.Load())
			}
			b7, err := f.Store.Load(context.Background(), "fan-1", checkpoint.AtBranch(2, 7))
			if err != nil || len(b7.Failures) != 1 || b7.Current == nil || b7.Current.Effects[0].Key != "fan-1:step2.7" || !b7.Current.Effects[0].Replayed {
				t.Fatalf("branch 7: failures %+v, checkpoint %+v (%v): want one failure and the effect replayed from the journal", b7.Failures, b7.Current, err)
			}

			replayed := testenv.RepublishSteps(t, f.JS)
			f.WaitDrained("fan", 30*time.Second)
			checkFanRun(t, f, "fan-1", n)
			p.check(t, n)
			if joins.Load() != 1 {
				t.Fatalf("after replaying %d messages the join ran %d times", replayed, joins.Load())
			}
		})
	}
}

// checkFanRun checks a completed fan run of n branches: the fan-out and
// the join as its steps, n branch checkpoints, and the join's sum of the
// outputs in branch order.
func checkFanRun(t *testing.T, f *testfleet.Fleet, id string, n int) {
	t.Helper()
	cps := f.Checkpoints(id)
	if len(cps) != 2 || cps[0].FanOut == nil || len(cps[0].FanOut.Branches) != n || cps[1].Status != checkpoint.StatusCompleted {
		t.Fatalf("checkpoints %+v: want the fan-out and the join", cps)
	}
	branches, err := f.Store.BranchCheckpoints(context.Background(), id, 2, n)
	if err != nil || len(branches) != n {
		t.Fatalf("%d branch checkpoints (%v), want %d", len(branches), err, n)
	}
	var st fanState
	if err := json.Unmarshal(cps[1].State, &st); err != nil {
		t.Fatal(err)
	}
	if st.Total != n*(n+1)/2 || len(st.Keys) != n {
		t.Fatalf("join state %+v: want total %d over %d keys", st, n*(n+1)/2, n)
	}
	for i, k := range st.Keys {
		if want := fmt.Sprintf("%s:step2.%d", id, i+1); k != want {
			t.Fatalf("output %d has key %q, want %q (branch order)", i+1, k, want)
		}
	}
}

// A branch that fails for good sends the run to the dead letters naming
// the branch; the other branches keep their checkpoints; a redrive runs
// only what has no checkpoint, then the join, and pays nobody twice.
func TestFanOutBranchFailsRunThenRedrive(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			const n = 8
			var p payments
			var broken atomic.Bool
			broken.Store(true)
			after := func(in payIn) error {
				if in.I == 5 && broken.Load() {
					return errors.New("ledger down")
				}
				return nil
			}
			reg := steps.NewRegistry().MustRegister(fanWorkflow(p.pay, after, nil))
			f := testfleet.New(t, kind)
			f.StartWorker(reg, nil)
			f.Start("fan", "fan-2", fmt.Sprintf(`{"branches": %d}`, n))
			dead := f.WaitStatus("fan-2", checkpoint.StatusDead, 60*time.Second)
			if dead.FailedBranch != 5 || !strings.Contains(dead.Error, "branch 5 (pay)") || !strings.Contains(dead.Error, "ledger down") {
				t.Fatalf("dead run: failed branch %d, error %q", dead.FailedBranch, dead.Error)
			}
			broken.Store(false)
			if _, err := f.Client.Redrive(context.Background(), "fan-2", "oncall"); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("fan-2", checkpoint.StatusCompleted, 60*time.Second)
			checkFanRun(t, f, "fan-2", n)
			p.check(t, n)
		})
	}
}

// A fan-out of no branches goes straight to its join, with no outputs; a
// step that starts no children goes straight to its next step.
func TestEmptyFanOutAndNoChildren(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var p payments
			none := steps.New[fanState]("nokids", 1)
			end := none.Ref("end")
			none.
				Step("start", func(_ context.Context, _ *steps.Context, st fanState) (steps.Outcome[fanState], error) {
					return steps.StartChildren(end, st), nil
				}).
				Step("end", func(_ context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
					results, err := steps.ChildResults(s)
					if err != nil || len(results) != 0 {
						return steps.Outcome[fanState]{}, fmt.Errorf("results %v, %v", results, err)
					}
					return steps.Complete(st), nil
				})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(fanWorkflow(p.pay, nil, nil), none), nil)
			f.Start("fan", "fan-0", `{"branches": 0}`)
			f.Start("nokids", "nokids-1", "")
			f.WaitStatus("fan-0", checkpoint.StatusCompleted, 30*time.Second)
			f.WaitStatus("nokids-1", checkpoint.StatusCompleted, 30*time.Second)
			p.check(t, 0)
		})
	}
}

// Upgrade (issue 23 item 5): a run sent to the dead letters by a branch
// before branch failures were stored on the branch's key (FailedBranch
// set, nothing on the branch's key, the other branches committed as that
// code wrote them) still gets its letter from a queued delivery of the
// branch, and a redrive by this code finishes it, paying only the branch
// that failed.
func TestBranchDeadWrittenByPreviousCode(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			var p payments
			f := testfleet.New(t, kind)
			s := f.Store
			run, err := s.CreateRun(ctx, checkpoint.Run{
				ID: "fan-old", Workflow: "fan", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "split",
				Input: json.RawMessage(`{"branches":3}`), CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC(),
			})
			if err != nil {
				t.Fatal(err)
			}
			fan := checkpoint.Checkpoint{RunID: "fan-old", Step: 1, Name: "split", State: json.RawMessage(`{"branches":3,"total":0,"keys":null}`),
				Next: "sum", Status: checkpoint.StatusRunning, Attempt: 1, At: time.Now().UTC(), FanOut: &checkpoint.FanOut{}}
			for i := 1; i <= 3; i++ {
				fan.FanOut.Branches = append(fan.FanOut.Branches, checkpoint.Branch{Step: "pay", Input: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			}
			run.Step, run.StepName, run.Steps = 2, "sum", 1
			if run, err = s.Commit(ctx, run, fan); err != nil {
				t.Fatal(err)
			}
			// Branches 1 and 3 as the previous code committed them (no
			// redrives field: it wrote none).
			for _, i := range []int{1, 3} {
				key := fmt.Sprintf("fan-old:step2.%d", i)
				if _, err := s.CommitBranch(ctx, checkpoint.Checkpoint{RunID: "fan-old", Step: 2, Branch: i, Name: "pay",
					State: json.RawMessage(fmt.Sprintf(`{"key":%q,"amount":%d}`, key, i)), Status: checkpoint.StatusRunning,
					Effects: []checkpoint.Effect{{Key: key}}, Attempt: 1, At: time.Now().UTC()}); err != nil && !errors.Is(err, checkpoint.ErrCheckpointExists) {
					t.Fatal(err)
				}
			}
			for a := 1; a <= 3; a++ {
				if _, err := s.RecordFailure(ctx, "fan-old", checkpoint.AtBranch(2, 2), checkpoint.Failure{Attempt: a, Error: "ledger down"}); err != nil {
					t.Fatal(err)
				}
			}
			// Marked dead by branch 2, as the previous deadLetter did.
			dead := run
			dead.Status, dead.Error, dead.FailedBranch = checkpoint.StatusDead, "branch 2 (pay) of the fan-out joined at step 2 failed 3 times: ledger down", 2
			if _, err := s.UpdateRun(ctx, dead); err != nil {
				t.Fatal(err)
			}
			f.StartWorker(steps.NewRegistry().MustRegister(fanWorkflow(p.pay, nil, nil)), nil)
			// A delivery of branch 2 still queued: it publishes the letter.
			if _, err := queue.PublishStep(ctx, f.JS, queue.BranchStep(dead, 2, 2, "pay"), "fan-old:2.2:old"); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 10*time.Second, "the dead letter", func() bool {
				dls, err := f.Client.DeadLetters(ctx)
				return err == nil && len(dls) == 1 && dls[0].RunID == "fan-old"
			})
			if r, err := s.GetRun(ctx, "fan-old"); err != nil || r.Status != checkpoint.StatusDead || r.FailedBranch != 2 {
				t.Fatalf("run after the queued branch: %+v, %v; want dead by branch 2", r, err)
			}
			if _, err := f.Client.Redrive(ctx, "fan-old", "oncall"); err != nil {
				t.Fatal(err)
			}
			done := f.WaitStatus("fan-old", checkpoint.StatusCompleted, 20*time.Second)
			cps := f.Checkpoints("fan-old")
			var st fanState
			if err := json.Unmarshal(cps[len(cps)-1].State, &st); err != nil || st.Total != 6 || len(st.Keys) != 3 {
				t.Fatalf("join state %+v (%v), run %+v: want total 6 over 3 keys", st, err, done)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.calls) != 1 || p.calls["fan-old:step2.2"] != 1 {
				t.Fatalf("paid %v: want branch 2 once, the others not again", p.calls)
			}
		})
	}
}
