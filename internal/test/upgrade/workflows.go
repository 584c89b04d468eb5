// Package upgrade proves that runs stored by an earlier release continue
// under this one and pay once (issue 26, "Upgrading"). Its fixtures in
// testdata were written by the release named in their file names with
// the workflows of this file; gen_test.go, run at that release, writes
// them again (testdata/README.md says how). TestMixedFleet runs a worker
// process of that release, built from the repository's history, beside
// one of this release (a rolling upgrade half-way).
//
// This file and mixed.go must compile at that release too: they use only
// pkg/steps' API, which both share.
package upgrade

import (
	"context"
	"errors"
	"maps"
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
	// RunRedriven is a run of up-dead's workflow that died, was redriven
	// and died again (a run record of a redriven run, written by that
	// release).
	RunRedriven = "up-redriven"
)

// Runs lists the top-level runs, in the order they are started.
var Runs = []string{RunQueued, RunApproval, RunSignal, RunChildren, RunSleep, RunDead, RunRedriven}

// Ledger is a payment provider that counts the payments it took per
// idempotency key (a step run twice pays twice only if it loses its key),
// and the steps' bodies count their entries in it: "<run>:<step>".
type Ledger struct {
	// Record, when set, is told each entry ("enter", "<run>:<step>") and
	// payment ("pay", key) as it is counted: a worker process of
	// TestMixedFleet writes them where its SIGKILL does not lose them.
	Record func(what, key string)

	mu      sync.Mutex
	paid    map[string]int
	entered map[string]int
}

// Enter counts an entry of step's body in run.
func (l *Ledger) Enter(s *steps.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entered == nil {
		l.entered = map[string]int{}
	}
	l.entered[s.RunID()+":"+s.StepName()]++
	if l.Record != nil {
		l.Record("enter", s.RunID()+":"+s.StepName())
	}
}

// Entered returns how many times each step's body was entered, by
// "<run>:<step>".
func (l *Ledger) Entered() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.entered)
}

// Pay takes a payment under key.
func (l *Ledger) Pay(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paid == nil {
		l.paid = map[string]int{}
	}
	l.paid[key]++
	if l.Record != nil {
		l.Record("pay", key)
	}
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
	return maps.Clone(l.paid)
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
	b := builder{l}
	return steps.NewRegistry().MustRegister(b.queued(), b.approval(), b.signal(), b.kid(), b.parent(),
		b.sleep(sleepUntil), b.dead(broken))
}

// builder makes the workflows' steps, each counting its entries and
// paying through l.
type builder struct{ l *Ledger }

// step adds a step whose body counts its entries first.
func (b builder) step(w *steps.Workflow[Claim], name string, fn func(context.Context, *steps.Context, Claim) (steps.Outcome[Claim], error)) {
	w.Step(name, func(ctx context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		b.l.Enter(s)
		return fn(ctx, s, st)
	})
}

// pay takes a payment as a journaled call under the step's key for name.
func (b builder) pay(ctx context.Context, s *steps.Context, name string) error {
	_, err := steps.Call(ctx, s, name, nil, func(context.Context) (string, error) {
		b.l.Pay(s.Key(name))
		return "paid " + s.Key(name), nil
	})
	return err
}

// charge adds the step that pays the deposit, then goes to next.
func (b builder) charge(w *steps.Workflow[Claim], next string) {
	ref := w.Ref(next)
	b.step(w, "charge", func(ctx context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		if err := b.pay(ctx, s, "deposit"); err != nil {
			return steps.Outcome[Claim]{}, err
		}
		return steps.Next(ref, st), nil
	})
}

// settle adds the step that pays the rest and ends the run.
func (b builder) settle(w *steps.Workflow[Claim]) {
	b.step(w, "settle", func(ctx context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		if err := b.pay(ctx, s, "settlement"); err != nil {
			return steps.Outcome[Claim]{}, err
		}
		return steps.Complete(st), nil
	})
}

// ask adds a step that waits for an approval, then goes to next (or
// ends the run when next is "").
func (b builder) ask(w *steps.Workflow[Claim], name, next string) {
	var ref steps.Ref[Claim]
	if next != "" {
		ref = w.Ref(next)
	}
	b.step(w, name, func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		d, wait, err := steps.Decision[Claim](s, steps.ApprovalRequest{Payload: st, Group: "adjusters", TTL: longTTL})
		if d == nil {
			return wait, err
		}
		if next == "" {
			return steps.Complete(st), nil
		}
		return steps.Next(ref, st), nil
	})
}

func (b builder) queued() *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-queued", 1)
	b.charge(w, "settle")
	b.settle(w)
	return w
}

func (b builder) approval() *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-approval", 1)
	b.charge(w, "review")
	b.ask(w, "review", "settle")
	b.settle(w)
	return w
}

func (b builder) signal() *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-signal", 1)
	docs := w.Signal("docs")
	b.charge(w, "await")
	next := w.Ref("settle")
	b.step(w, "await", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		got, wait, err := steps.Recv(s, docs, longTTL)
		if got == nil {
			return wait, err
		}
		st.Note = string(got.Data)
		return steps.Next(next, st), nil
	})
	b.settle(w)
	return w
}

func (b builder) kid() *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-kid", 1)
	b.ask(w, "ask", "")
	return w
}

func (b builder) parent() *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-children", 1)
	next := w.Ref("settle")
	b.step(w, "spawn", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		return steps.StartChildren(next, st, steps.Child{Workflow: "up-kid", ID: RunKid, Input: st}), nil
	})
	b.settle(w)
	return w
}

func (b builder) sleep(until time.Time) *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-sleep", 1)
	b.charge(w, "nap")
	next := w.Ref("settle")
	b.step(w, "nap", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		return steps.SleepUntil(next, st, until), nil
	})
	b.settle(w)
	return w
}

func (b builder) dead(broken bool) *steps.Workflow[Claim] {
	w := steps.New[Claim]("up-dead", 1)
	b.charge(w, "fragile")
	next := w.Ref("settle")
	b.step(w, "fragile", func(_ context.Context, s *steps.Context, st Claim) (steps.Outcome[Claim], error) {
		if broken {
			return steps.Outcome[Claim]{}, steps.Permanent(errFragile)
		}
		return steps.Next(next, st), nil
	})
	b.settle(w)
	return w
}
