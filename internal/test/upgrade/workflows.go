// Package upgrade proves that runs stored by an earlier release continue
// under this one and pay once (issue 26, "Upgrading"). Its fixtures in
// testdata were written by the release named in their file names with
// the workflows of this file; gen_test.go, run at that release, writes
// them again (testdata/README.md says how).
//
// This file must compile at that release too: it uses only pkg/steps'
// API, which both share.
package upgrade

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// The runs the fixtures hold, each stopped where the earlier release
// left it.
const (
	// RunQueued was started with no worker running: its first step is a
	// message on the step stream that no worker took yet.
	RunQueued = "up-queued"
	// RunApproval charged, then parked at an approval (step 2).
	RunApproval = "up-approval"
	// RunSignal charged, then waits for the signal "docs" (step 2).
	RunSignal = "up-signal"
	// RunChildren started a child, RunKid, and waits for it; the child
	// is parked at an approval.
	RunChildren = "up-children"
	RunKid      = "up-children-kid"
	// RunSleep charged, then sleeps until a time long past when the
	// test runs: the scheduler's first sweep wakes it.
	RunSleep = "up-sleep"
	// RunDead charged, then its step "fragile" failed for good: it is
	// dead, with its letter on the dead-letter stream.
	RunDead = "up-dead"
)

// Runs lists the top-level runs, in the order they are started.
var Runs = []string{RunQueued, RunApproval, RunSignal, RunChildren, RunSleep, RunDead}

// Ledger is a payment provider that counts the payments it took per
// idempotency key: a step run twice pays twice only if it loses its key.
type Ledger struct {
	mu   sync.Mutex
	paid map[string]int
}

// Pay takes a payment under key.
func (l *Ledger) Pay(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paid == nil {
		l.paid = map[string]int{}
	}
	l.paid[key]++
}

// Paid returns how many payments key took.
func (l *Ledger) Paid(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paid[key]
}

// Keys returns every key that took a payment, with its count.
func (l *Ledger) Keys() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.paid))
	for k, n := range l.paid {
		out[k] = n
	}
	return out
}

// Claim is the state of every workflow here.
type Claim struct {
	Amount int    `json:"amount"`
	Note   string `json:"note,omitempty"`
}

// longTTL outlives any fixture: a wait of the fixtures must not expire
// before a test decides it.
const longTTL = 100 * 365 * 24 * time.Hour

var errFragile = errors.New("the ledger refused the call")

// Workflows returns the workflows of the fixtures. broken makes the step
// "fragile" fail for good (as it did when the fixtures were written);
// sleepUntil is when "up-sleep"'s step wakes it.
func Workflows(l *Ledger, broken bool, sleepUntil time.Time) *steps.Registry {
	pay := func(ctx context.Context, s *steps.Context, name string) error {
		_, err := steps.Call(ctx, s, name, nil, func(context.Context) (string, error) {
			l.Pay(s.Key(name))
			return "paid " + s.Key(name), nil
		})
		return err
	}
	// charge pays the deposit, then goes to next.
	charge := func(next string, w *steps.Workflow[Claim]) {
		ref := w.Ref(next)
		w.Step("charge", func(ctx context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
			if err := pay(ctx, s, "deposit"); err != nil {
				return steps.Outcome[Claim]{}, err
			}
			return steps.Next(ref, st), nil
		})
	}
	// settle pays the rest and ends the run.
	settle := func(w *steps.Workflow[Claim]) {
		w.Step("settle", func(ctx context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
			if err := pay(ctx, s, "settlement"); err != nil {
				return steps.Outcome[Claim]{}, err
			}
			return steps.Complete(st), nil
		})
	}

	queued := steps.New[Claim]("up-queued", 1)
	charge("settle", queued)
	settle(queued)

	approval := steps.New[Claim]("up-approval", 1)
	charge("review", approval)
	toSettle := approval.Ref("settle")
	approval.Step("review", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		d, wait, err := steps.Decision[Claim](s, steps.ApprovalRequest{Payload: st, Group: "adjusters", TTL: longTTL})
		if d == nil {
			return wait, err
		}
		return steps.Next(toSettle, st), nil
	})
	settle(approval)

	signal := steps.New[Claim]("up-signal", 1)
	docs := signal.Signal("docs")
	charge("await", signal)
	afterDocs := signal.Ref("settle")
	signal.Step("await", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		got, wait, err := steps.Recv(s, docs, longTTL)
		if got == nil {
			return wait, err
		}
		st.Note = string(got.Data)
		return steps.Next(afterDocs, st), nil
	})
	settle(signal)

	kid := steps.New[Claim]("up-kid", 1)
	kid.Step("ask", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		d, wait, err := steps.Decision[Claim](s, steps.ApprovalRequest{Payload: st, Group: "adjusters", TTL: longTTL})
		if d == nil {
			return wait, err
		}
		return steps.Complete(st), nil
	})
	parent := steps.New[Claim]("up-children", 1)
	afterKids := parent.Ref("settle")
	parent.Step("spawn", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		return steps.StartChildren(afterKids, st, steps.Child{Workflow: "up-kid", ID: RunKid, Input: st}), nil
	})
	settle(parent)

	sleep := steps.New[Claim]("up-sleep", 1)
	charge("nap", sleep)
	afterNap := sleep.Ref("settle")
	sleep.Step("nap", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		return steps.SleepUntil(afterNap, st, sleepUntil), nil
	})
	settle(sleep)

	dead := steps.New[Claim]("up-dead", 1)
	charge("fragile", dead)
	afterFragile := dead.Ref("settle")
	dead.Step("fragile", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		if broken {
			return steps.Outcome[Claim]{}, steps.Permanent(errFragile)
		}
		return steps.Next(afterFragile, st), nil
	})
	settle(dead)

	return steps.NewRegistry().MustRegister(queued, approval, signal, kid, parent, sleep, dead)
}
