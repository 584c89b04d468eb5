package worker

import "context"

// Boundary is a point of the step protocol (DESIGN.md) between two of its
// actions. Hooks run there: a crash injected at a boundary is the crash
// the protocol must survive, and a tracer can open or close spans there.
type Boundary string

// The boundaries of one delivery, in the order they are reached. A
// delivery that finds its step done, stale or failing stops early and
// reaches only some of them.
const (
	// Received: a step message is decoded. Nothing is loaded yet and the
	// delivery is not yet kept alive by heartbeats: a hook that blocks
	// here looks to the server like a hung worker.
	Received Boundary = "received"
	// BeforeStep: the run is loaded and at this step; its body runs next.
	BeforeStep Boundary = "before-step"
	// AfterCall: a journaled call (steps.Call) returned; its result is not
	// recorded yet. A crash here leaves an effect nobody recorded: the
	// next attempt calls again with the same idempotency key.
	AfterCall Boundary = "after-call"
	// AfterRecord: a call's result is recorded, the step is not committed.
	AfterRecord Boundary = "after-record"
	// AfterCheckpoint: the step is committed; the next step is not published.
	AfterCheckpoint Boundary = "after-checkpoint"
	// AfterPublish: the next step is published; the delivery is not acked.
	AfterPublish Boundary = "after-publish"
	// DeadMarked: the step or branch failed for good and the run is
	// marked dead; its dead letter is not published yet. A crash here is
	// repaired by the redelivery, which finds the run dead at its step.
	DeadMarked Boundary = "dead-marked"
)

// Delivery names the step message a hook is called for.
type Delivery struct {
	RunID    string
	Workflow string
	// Step is the step of the message, the join step for a branch.
	Step int
	// Branch is i for branch i of the fan-out joined at Step, 0 for a step.
	Branch int
	// Attempt is the server's delivery count of the message: 1 the first time.
	Attempt int
}

// Hook is called at every Boundary of every delivery and the delivery
// waits while it runs. AfterCall and AfterRecord come once per journaled
// call, on the goroutine that made the call, with the context of the
// journal's write (a hook slower than its 10s deadline fails the write);
// the others come once per delivery, on the goroutine that handles it.
// Hooks must be safe for concurrent use. The reference binaries install crash injection
// (DURABLE_CRASH) as a hook; a worker without hooks calls nothing.
type Hook interface {
	At(ctx context.Context, b Boundary, d Delivery)
}

// HookFunc adapts a function to a Hook.
type HookFunc func(ctx context.Context, b Boundary, d Delivery)

// At calls f.
func (f HookFunc) At(ctx context.Context, b Boundary, d Delivery) { f(ctx, b, d) }

// at runs the worker's hooks at b for delivery d.
func (w *Worker) at(ctx context.Context, b Boundary, d *delivery) {
	if len(w.cfg.Hooks) == 0 {
		return
	}
	hd := Delivery{RunID: d.m.RunID, Workflow: d.m.Workflow, Step: d.m.At(), Branch: d.m.Branch, Attempt: d.attempt}
	for _, h := range w.cfg.Hooks {
		h.At(ctx, b, hd)
	}
}
