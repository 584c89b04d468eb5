// Package steps is what workflows are written with: a workflow is a named,
// versioned set of steps over a state type S, and each step returns where the
// run goes next.
//
//	type Claim struct {
//		Amount     int    `json:"amount"`
//		Assessment string `json:"assessment"`
//	}
//
//	func assess(ctx context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
//		// Journaled: a retry of this step gets the recorded answer back.
//		a, err := steps.Call(ctx, s, "damage-model", c, func(ctx context.Context) (string, error) {
//			return askModel(ctx, c) // your model client
//		})
//		if err != nil {
//			return steps.Outcome[Claim]{}, err // retried by the step's RetryPolicy
//		}
//		c.Assessment = a
//		return steps.Next("finish", c), nil
//	}
//
//	func finish(ctx context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
//		return steps.Complete(c), nil
//	}
//
//	reg := steps.NewRegistry().MustRegister(
//		steps.New[Claim]("claim", 1).
//			Step("assess", assess, steps.WithRetry(steps.RetryPolicy{Attempts: 8})).
//			Step("finish", finish),
//	)
//	workercmd.Main(workercmd.Config{Registry: reg}) // your worker binary (pkg/workercmd)
//
// The shape follows from what a worker may do to a step at any moment: crash,
// be redelivered, run it twice at once.
//
// State is checkpointed per step. A step is a function of the state the
// previous step returned, encoded as JSON and stored before the next step
// starts; a resumed run starts from the last checkpoint and never runs a
// completed step again. Keep S JSON-encodable and everything the run needs in
// it, not in variables around the workflow.
//
// Calls are journaled. A step interrupted half way runs again from its start,
// so anything not deterministic or not free (a model, a tool, a payment) goes
// through [Call]: its result is stored as soon as fn returns, and a retry of
// the same step gets it back instead of calling again. The same name with
// other arguments is [ErrJournalMismatch]: the step does not replay the way it
// ran. The journal cannot cover a crash after an effect and before its
// record, so an effect also carries an idempotency key that names the logical
// step ("claim-0042:step6"), never the attempt: [Effect] hands it to the
// function that makes the effect, journals the result and lists the effect
// on the run.
//
// Waiting is a state. [Park] parks the run: the worker stores the request and
// lets go, so a run can wait days without holding a process. When someone
// decides, the same step runs again from its start and finds the decision with
// [Context.Approval] — only if it was taken on the payload the step would
// present now; [checkpoint.Approval.Approved] says which way it went.
//
// A step can also wait for a named signal: [AwaitSignal] parks the run and
// [Context.Signal] reads what came. The workflow declares its signals with
// [Workflow.Signals], which any valid token may send through the approver's
// API, or with [Workflow.SignalFrom], which names the token groups that may
// (and operators); signed events from known systems and `durable signal`
// are not limited by groups.
//
// Control flow is explicit: [Next], [Complete], [Fail], [Park] and [SleepUntil] are the
// outcomes; a returned error is retried by the step's [RetryPolicy], and one
// wrapped with [Permanent] dead-letters the run at once. Workflow and step
// names are persisted with every run: keep them stable, and register a new
// version with [New] rather than changing the steps of one that has runs.
package steps
