// Package steps is what workflows are written with: a workflow is a named,
// versioned set of steps over a state type S, and each step returns where the
// run goes next.
//
//	type Claim struct {
//		Amount     int    `json:"amount"`
//		Assessment string `json:"assessment"`
//	}
//
//	w := steps.New[Claim]("claim", 1)
//	finish := w.Ref("finish") // registering w fails if no step "finish" is added
//	w.Step("assess", func(ctx context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
//		// Journaled: a retry of this step gets the recorded answer back.
//		a, err := steps.Call(ctx, s, "damage-model", c, func(ctx context.Context) (string, error) {
//			return askModel(ctx, c) // your model client
//		})
//		if err != nil {
//			return steps.Outcome[Claim]{}, err // retried by the step's RetryPolicy
//		}
//		c.Assessment = a
//		return steps.Next(finish, c), nil
//	}, steps.WithRetry(steps.RetryPolicy{Attempts: 8})).
//		Step("finish", func(ctx context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
//			return steps.Complete(c), nil
//		})
//
//	reg := steps.NewRegistry().MustRegister(w)
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
// Waiting is a state, read in one call. [Decision] returns the decision on
// an approval request, or the outcome that parks the run on it: the worker
// stores the request and lets go, so a run can wait days without holding a
// process. When someone decides, the same step runs again from its start and
// the same call returns the decision — only if it was taken on the payload
// the step would present now; [checkpoint.Approval.Approved] says which way
// it went. [Recv] does the same for a named signal, with a TTL, and
// [RunChildren] for child runs:
//
//	sig, wait, err := steps.Recv(s, reviewed, time.Hour)
//	if sig == nil {
//		return wait, err // parks; after an hour with none, the run goes dead
//	}
//
// A workflow declares its signals with [Workflow.Signal], naming the token
// groups that may send each through the approver's API (any token when it
// names none; operators always); signed events from known systems and
// `durable signal` are not limited by groups.
//
// Control flow is explicit: [Next], [Complete], [Fail], [Park], [SleepUntil],
// [FanOut], [StartChildren] and [AwaitSignal] are the outcomes, and a step
// names where the run goes by a [Ref], which registration checks; a returned
// error is retried by the step's [RetryPolicy], and one wrapped with
// [Permanent] dead-letters the run at once. Workflow and step names are
// persisted with every run: keep them stable, and register a new version
// with [New] rather than changing the steps of one that has runs.
package steps
