package upgrade

import (
	"context"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// WorkTime is how long each of mx-pipeline's work steps works: long
// enough that a worker SIGKILLed as one begins dies with it in flight.
const WorkTime = time.Second

// MixedWorkflows returns the workflows of TestMixedFleet, whose worker
// processes of both releases run them: up-queued, up-approval, up-signal,
// up-kid and up-sleep of Workflows (up-children's child has one fixed id,
// and up-dead fails for good), and
//   - mx-pipeline: charge, work1, work2, work3 (each working WorkTime),
//     settle;
//   - mx-family: a child up-kid "<run>-kid" (it parks at an approval),
//     then settle;
//   - mx-flaky: charge, a step "fragile" that fails for good while
//     refused(run), settle: the run dies, and finishes once redriven.
//
// Like workflows.go, this file must compile at the previous release.
func MixedWorkflows(l *Ledger, sleepUntil time.Time, refused func(run string) bool) *steps.Registry {
	b := builder{l}
	return steps.NewRegistry().MustRegister(b.queued(), b.approval(), b.signal(), b.kid(), b.sleep(sleepUntil),
		b.pipeline(), b.family(), b.flaky(refused))
}

func (b builder) pipeline() *steps.Workflow[Claim] {
	w := steps.New[Claim]("mx-pipeline", 1)
	b.charge(w, "work1")
	for i, name := range []string{"work1", "work2", "work3"} {
		next := w.Ref([]string{"work2", "work3", "settle"}[i])
		b.step(w, name, func(ctx context.Context, _ *steps.Context, st Claim) (steps.Outcome[Claim], error) {
			select {
			case <-time.After(WorkTime):
			case <-ctx.Done():
				return steps.Outcome[Claim]{}, ctx.Err()
			}
			return steps.Next(next, st), nil
		})
	}
	b.settle(w)
	return w
}

func (b builder) family() *steps.Workflow[Claim] {
	w := steps.New[Claim]("mx-family", 1)
	next := w.Ref("settle")
	b.step(w, "spawn", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		return steps.StartChildren(next, st, steps.Child{Workflow: "up-kid", ID: s.RunID() + "-kid", Input: st}), nil
	})
	b.settle(w)
	return w
}

func (b builder) flaky(refused func(run string) bool) *steps.Workflow[Claim] {
	w := steps.New[Claim]("mx-flaky", 1)
	b.charge(w, "fragile")
	next := w.Ref("settle")
	b.step(w, "fragile", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		if refused(s.RunID()) {
			return steps.Outcome[Claim]{}, steps.Permanent(errFragile)
		}
		return steps.Next(next, st), nil
	})
	b.settle(w)
	return w
}
