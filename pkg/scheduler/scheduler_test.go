package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/scheduler"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

type state struct {
	N int `json:"n"`
}

// asking parks for group adjusters with the given expiry policy; a
// rejection fails the run with the decider's name.
func asking(name string, req steps.ApprovalRequest) *steps.Workflow[state] {
	return steps.New[state](name, 1).
		Step("ask", func(_ context.Context, s *steps.Context, st state) (steps.Outcome[state], error) {
			r := req
			r.Payload = map[string]string{"run": s.RunID()}
			d, err := s.Approval(r)
			if err != nil {
				return steps.Outcome[state]{}, err
			}
			if d == nil {
				return steps.Park[state](r), nil
			}
			if d.Decision != checkpoint.DecisionApproved {
				return steps.Fail(st, "rejected by "+d.By+": "+d.Reason), nil
			}
			return steps.Complete(st), nil
		})
}

func kinds(run checkpoint.Run) string {
	var k []string
	for _, a := range run.Audit {
		k = append(k, a.Kind)
	}
	return strings.Join(k, ",")
}

// Acceptance 1: with TTLs of seconds an unanswered approval expires to
// reject; an escalation chain runs in order; reminders go out N times,
// then the run is rejected. The audit shows each event.
func TestExpiryPolicies(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ttl := 700 * time.Millisecond
			f.StartWorker(steps.NewRegistry().MustRegister(
				asking("reject", steps.ApprovalRequest{Group: "adjusters", TTL: ttl}),
				asking("escalate", steps.ApprovalRequest{Group: "adjusters", TTL: ttl, OnExpiry: steps.ExpireEscalate, EscalateTo: "supervisors"}),
				asking("remind", steps.ApprovalRequest{Group: "adjusters", TTL: ttl, OnExpiry: steps.ExpireRemind, Reminders: 2}),
			), nil)
			sch := f.StartScheduler(nil)
			f.Start("reject", "x-reject", "")
			f.Start("escalate", "x-escalate", "")
			f.Start("remind", "x-remind", "")

			r := f.WaitStatus("x-reject", checkpoint.StatusFailed, 30*time.Second)
			if got := kinds(r); got != "parked,expired" {
				t.Errorf("reject audit %q", got)
			}
			if !strings.HasPrefix(r.Error, "rejected by scheduler: expired") {
				t.Errorf("reject error %q", r.Error)
			}
			if len(r.Approvals) != 1 || r.Approvals[0].Channel != "scheduler" || r.Approvals[0].Decision != "rejected" {
				t.Errorf("reject approvals %+v", r.Approvals)
			}

			e := f.WaitStatus("x-escalate", checkpoint.StatusFailed, 30*time.Second)
			if got := kinds(e); got != "parked,escalated,expired" {
				t.Errorf("escalate audit %q", got)
			}
			if e.Audit[1].Group != "supervisors" || e.Audit[2].Group != "supervisors" {
				t.Errorf("escalation groups: %+v", e.Audit)
			}

			m := f.WaitStatus("x-remind", checkpoint.StatusFailed, 30*time.Second)
			if got := kinds(m); got != "parked,reminded,reminded,expired" {
				t.Errorf("remind audit %q", got)
			}
			// The reminders went out on the event stream.
			st, err := f.JS.Stream(context.Background(), queue.EventStream)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(queue.EventSubject("remind", "reminder")))
			if err != nil {
				t.Fatal(err)
			}
			if n := info.State.Subjects[queue.EventSubject("remind", "reminder")]; n != 2 {
				t.Errorf("%d reminder events, want 2", n)
			}
			s := sch.Stats()
			if s.Rejected != 3 || s.Escalated != 1 || s.Reminded != 2 {
				t.Errorf("scheduler stats %+v", s)
			}
		})
	}
}

// Acceptance 2: two schedulers over 1,000 expiring waits: each handled
// exactly once, none missed.
func TestTwoSchedulersHandleEachWaitOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 runs")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a fleet of its own; mostly waits on expiries and round trips
			twoSchedulers(t, kind)
		})
	}
}

func twoSchedulers(t *testing.T, kind string) {
	const runs = 1000
	f := testfleet.New(t, kind)
	f.StartWorker(steps.NewRegistry().MustRegister(asking("bulk", steps.ApprovalRequest{Group: "adjusters", TTL: 3 * time.Second})),
		func(c *worker.Config) { c.Concurrency = 64 })
	for i := range runs {
		f.Start("bulk", fmt.Sprintf("bulk-%04d", i), "")
	}
	a := f.StartScheduler(func(c *scheduler.Config) { c.Batch = 25 })
	b := f.StartScheduler(func(c *scheduler.Config) { c.Batch = 25 })
	ctx := context.Background()
	testenv.Eventually(t, 2*time.Minute, "all runs failed by expiry", func() bool {
		failed, err := f.Store.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusFailed})
		return err == nil && len(failed) == runs
	})
	all, err := f.Store.ListRuns(ctx, checkpoint.Filter{Workflow: "bulk"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		expired := 0
		for _, e := range r.Audit {
			if e.Kind == checkpoint.AuditExpired {
				expired++
			}
		}
		if expired != 1 || len(r.Approvals) != 1 {
			t.Fatalf("%s: %d expiries and %d decisions, want 1 each", r.ID, expired, len(r.Approvals))
		}
	}
	sa, sb := a.Stats(), b.Stats()
	t.Logf("scheduler a: %+v; b: %+v", sa, sb)
	if sa.Rejected+sb.Rejected != runs {
		t.Errorf("%d + %d rejections, want %d", sa.Rejected, sb.Rejected, runs)
	}
	if sa.Rejected == 0 || sb.Rejected == 0 {
		t.Logf("one scheduler did all the work (legal, but the claim was not exercised concurrently)")
	}
}

// A step sleeps on a durable timer; the scheduler wakes the run on any worker.
func TestDurableTimer(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			var woke time.Time
			flow := steps.New[state]("sleeper", 1)
			after := flow.Ref("after")
			flow.
				Step("start", func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
					return steps.SleepUntil(after, st, time.Now().Add(500*time.Millisecond)), nil
				}).
				Step("after", func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
					woke = time.Now()
					st.N = 1
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
			f.StartScheduler(nil)
			began := time.Now()
			f.Start("sleeper", "sleep-1", "")
			waiting := f.WaitStatus("sleep-1", checkpoint.StatusWaiting, 10*time.Second)
			if waiting.Wait == nil || waiting.Wait.Kind != checkpoint.WaitTimer || waiting.Step != 2 {
				t.Fatalf("sleeping run %+v", waiting)
			}
			done := f.WaitStatus("sleep-1", checkpoint.StatusCompleted, 20*time.Second)
			if woke.Sub(began) < 500*time.Millisecond {
				t.Errorf("woke after %s, before the timer", woke.Sub(began))
			}
			if kinds(done) != "timer" {
				t.Errorf("audit %q", kinds(done))
			}
		})
	}
}

// slowFinish is the real store, with the scheduler slow to finish a
// claim: it gets there only after the woken step ran and parked again.
type slowFinish struct{ checkpoint.Store }

func (s slowFinish) FinishDue(ctx context.Context, leaseUntil time.Time, done ...checkpoint.DueNext) error {
	time.Sleep(300 * time.Millisecond)
	return s.Store.FinishDue(ctx, leaseUntil, done...)
}

func (s slowFinish) UnindexDue(ctx context.Context, id string) error {
	time.Sleep(300 * time.Millisecond)
	return s.Store.UnindexDue(ctx, id)
}

// A woken step that sleeps again indexes its new deadline before the
// scheduler is done with the old one; the scheduler must not remove it
// (it did: the run then waited for the repair pass, a minute or more).
func TestTimerAfterTimer(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			sleep := func(next steps.Ref[state]) steps.StepFunc[state] {
				return func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
					return steps.SleepUntil(next, st, time.Now().Add(100*time.Millisecond)), nil
				}
			}
			flow := steps.New[state]("twice", 1)
			flow.Step("a", sleep(flow.Ref("b"))).Step("b", sleep(flow.Ref("c"))).
				Step("c", func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
					return steps.Complete(st), nil
				})
			f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
			f.StartScheduler(func(c *scheduler.Config) { c.Client = client.New(f.JS, slowFinish{f.Store}) })
			f.Start("twice", "tt-1", "")
			done := f.WaitStatus("tt-1", checkpoint.StatusCompleted, 15*time.Second)
			if kinds(done) != "timer,timer" {
				t.Errorf("audit %q", kinds(done))
			}
		})
	}
}

// A running run whose step message was lost is repaired: the scheduler
// publishes its step again.
func TestStuckRunRepaired(t *testing.T) {
	f := testfleet.New(t, "redis")
	flow := steps.New[state]("stuck", 1).
		Step("only", func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
			return steps.Complete(st), nil
		})
	f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
	// A run record without its message, as after a crash between the two.
	old := time.Now().Add(-time.Hour)
	if _, err := f.Store.CreateRun(context.Background(), checkpoint.Run{ID: "lost-1", Workflow: "stuck", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "only", CreatedAt: old, UpdatedAt: old}); err != nil {
		t.Fatal(err)
	}
	sch := f.StartScheduler(func(c *scheduler.Config) {
		c.StuckAfter, c.StepTimeout = time.Minute, time.Second
		c.RepairInterval = 200 * time.Millisecond
	})
	f.WaitStatus("lost-1", checkpoint.StatusCompleted, 20*time.Second)
	// The repair is counted once its step is published and its liveness
	// mark written: the run may complete before that.
	for deadline := time.Now().Add(5 * time.Second); sch.Stats().Repaired < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no repair counted")
		}
	}
}

// Passes that find the same stuck state publish its step once and count
// one repair; progress makes a new state, repaired again.
func TestRepeatedRepairCountsOnce(t *testing.T) {
	f := testfleet.New(t, "redis")
	ctx := context.Background()
	if err := queue.Provision(ctx, f.JS, queue.Config{}); err != nil { // no worker here to do it
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	_, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: "lost-2", Workflow: "nobody", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "only", CreatedAt: old, UpdatedAt: old})
	if err != nil {
		t.Fatal(err)
	}
	sch, err := scheduler.New(scheduler.Config{Client: f.Client, StuckAfter: time.Minute, StepTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	messages := func() uint64 {
		st, err := f.JS.Stream(ctx, queue.StepStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(queue.StepSubject("nobody", "lost-2")))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[queue.StepSubject("nobody", "lost-2")]
	}
	for range 3 {
		sch.Repair(ctx)
	}
	if got, msgs := sch.Stats().Repaired, messages(); got != 1 || msgs != 1 {
		t.Fatalf("after 3 passes on one stuck state: %d repairs counted, %d messages; want 1 and 1", got, msgs)
	}
	// No progress for as long again after the repair: a new stuck state.
	later, err := scheduler.New(scheduler.Config{Client: f.Client, StuckAfter: time.Minute, StepTimeout: time.Second,
		Now: func() time.Time { return time.Now().Add(2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	later.Repair(ctx)
	later.Repair(ctx)
	if got, msgs := later.Stats().Repaired, messages(); got != 1 || msgs != 2 {
		t.Fatalf("after a new stuck state: %d repairs counted, %d messages; want 1 and 2", got, msgs)
	}
}

// Acceptance 6 (second half): an agent loop that never finishes ends dead
// at its max-steps cap, with the reason.
func TestMaxStepsCap(t *testing.T) {
	f := testfleet.New(t, "redis")
	loop := steps.New[state]("forever", 1)
	think := loop.Ref("think")
	loop.WithCaps(steps.Caps{MaxSteps: 7}).
		Step("think", func(_ context.Context, _ *steps.Context, st state) (steps.Outcome[state], error) {
			st.N++
			return steps.Next(think, st), nil
		})
	f.StartWorker(steps.NewRegistry().MustRegister(loop), nil)
	f.Start("forever", "loop-1", "")
	dead := f.WaitStatus("loop-1", checkpoint.StatusDead, 20*time.Second)
	if !strings.Contains(dead.Error, "max steps") || dead.Steps != 7 {
		t.Errorf("dead run: error %q after %d steps", dead.Error, dead.Steps)
	}
	cps, err := f.Store.Checkpoints(context.Background(), "loop-1")
	if err != nil || len(cps) != 7 {
		t.Errorf("%d checkpoints (%v), want 7", len(cps), err)
	}
}

// A run that spends past its cap ends dead with the reason; the spend is
// summed from what committed steps reported.
func TestMaxSpendCap(t *testing.T) {
	f := testfleet.New(t, "kv")
	loop := steps.New[state]("spender", 1)
	callModel := loop.Ref("call-model")
	loop.WithCaps(steps.Caps{MaxSpend: 3.5}).
		Step("call-model", func(_ context.Context, s *steps.Context, st state) (steps.Outcome[state], error) {
			s.Spend(1.0)
			st.N++
			return steps.Next(callModel, st), nil
		})
	f.StartWorker(steps.NewRegistry().MustRegister(loop), nil)
	f.Start("spender", "spend-1", "")
	dead := f.WaitStatus("spend-1", checkpoint.StatusDead, 20*time.Second)
	if !strings.Contains(dead.Error, "max spend") || dead.Spend != 4 || dead.Steps != 4 {
		t.Errorf("dead run: error %q, spend %v after %d steps", dead.Error, dead.Spend, dead.Steps)
	}
}
