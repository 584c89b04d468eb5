package steps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// Order is the state of the example workflow: whatever a step returns is
// checkpointed as JSON and handed to the next step.
type Order struct {
	Items   int  `json:"items"`
	Total   int  `json:"total"`
	Shipped bool `json:"shipped"`
}

// Claim is the state of the approval examples.
type Claim struct {
	Amount     int    `json:"amount"`
	ApprovedBy string `json:"approved_by,omitempty"`
}

func ExampleNew() {
	wf := steps.New[Order]("orders", 1)
	// Steps go to each other by Ref: registering the workflow fails if
	// one names no step.
	pay, ship := wf.Ref("pay"), wf.Ref("ship")
	wf.Step("price", func(_ context.Context, _ *steps.Context, o Order) (steps.Outcome[Order], error) {
		o.Total = o.Items * 25
		return steps.Next(pay, o), nil
	}).
		Step("pay", func(_ context.Context, _ *steps.Context, o Order) (steps.Outcome[Order], error) {
			if o.Total > 500 {
				return steps.Fail(o, "over the card limit"), nil
			}
			return steps.Next(ship, o), nil
		}).
		Step("ship", func(_ context.Context, _ *steps.Context, o Order) (steps.Outcome[Order], error) {
			o.Shipped = true
			return steps.Complete(o), nil
		})
	if err := wf.Validate(); err != nil {
		fmt.Println(err)
		return
	}

	// What a worker does, one step message at a time: run the step on the
	// state checkpointed by the step before (the run input for the first)
	// and persist the Result before the next step starts.
	step, state := wf.FirstStep(), json.RawMessage(`{"items":3}`)
	for n := 1; ; n++ {
		s := steps.NewContext(steps.ContextConfig{RunID: "order-7", Workflow: wf.Name(), Version: wf.Version(), Step: n, StepName: step, Attempt: 1})
		res, err := wf.Execute(context.Background(), s, step, state, n == 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		to := res.Kind.String()
		if res.Kind == steps.KindNext {
			to += " " + res.Next
		}
		fmt.Printf("step %d %s: %s %s\n", n, step, to, res.State)
		if res.Kind != steps.KindNext {
			break
		}
		step, state = res.Next, res.State
	}
	// Output:
	// step 1 price: next pay {"items":3,"total":75,"shipped":false}
	// step 2 pay: next ship {"items":3,"total":75,"shipped":false}
	// step 3 ship: complete {"items":3,"total":75,"shipped":true}
}

func ExampleCall() {
	modelCalls := 0
	// The body of a step: one model call, journaled under the name "assess".
	assess := func(ctx context.Context, s *steps.Context) (string, error) {
		args := map[string]string{"claim": s.RunID(), "photo": "bumper.jpg"}
		return steps.Call(ctx, s, "assess", args, func(ctx context.Context) (string, error) {
			modelCalls++ // stands in for a model: not deterministic, not free
			return "rear bumper, repairable", nil
		})
	}

	ctx := context.Background()
	first := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: 1})
	a, _ := assess(ctx, first)

	// The worker died before checkpointing step 3. The redelivery gets the
	// journal of the step (a worker loads it from the store its Recorder
	// wrote to; here the first attempt's calls are handed over directly).
	retry := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: 2, Journal: first.Calls()})
	b, _ := assess(ctx, retry)

	fmt.Println(a)
	fmt.Println(b)
	fmt.Println("model called", modelCalls, "time")
	fmt.Println("replayed on attempt 2:", retry.Calls()[0].Replayed)

	// A retry that asks something else under the same name is a bug in the
	// workflow, not something to paper over with a second call.
	changed := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: 3, Journal: first.Calls()})
	_, err := steps.Call(ctx, changed, "assess", "another photo", func(context.Context) (string, error) { return "", nil })
	fmt.Println(errors.Is(err, steps.ErrJournalMismatch))
	// Output:
	// rear bumper, repairable
	// rear bumper, repairable
	// model called 1 time
	// replayed on attempt 2: true
	// true
}

func ExamplePark() {
	wf := steps.New[Claim]("claim", 1).
		Step("approve", func(_ context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
			req := steps.ApprovalRequest{
				Payload:    map[string]any{"claim": s.RunID(), "amount": c.Amount},
				Group:      "adjusters",
				TTL:        72 * time.Hour,
				OnExpiry:   steps.ExpireEscalate,
				EscalateTo: "supervisors",
			}
			if d, err := s.Approval(req); err != nil || d == nil {
				// No decision yet: park. The worker acks and forgets the run.
				return steps.Park[Claim](req), err
			}
			return steps.Complete(c), nil
		})

	s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 5, Attempt: 1})
	res, err := wf.Execute(context.Background(), s, "approve", json.RawMessage(`{"amount":1840}`), false)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Kind, res.Wait.Group, res.Wait.TTL, res.Wait.OnExpiry, res.Wait.EscalateTo)
	// Output:
	// wait adjusters 72h0m0s escalate supervisors
}

func ExampleDecision() {
	wf := steps.New[Claim]("claim", 1)
	pay := wf.Ref("pay")
	wf.Step("approve", func(_ context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
		// Re-read the facts on every run of the step: a decision
		// applies only to the payload it was taken on.
		req := steps.ApprovalRequest{Payload: map[string]any{"claim": s.RunID(), "amount": c.Amount}, Group: "adjusters"}
		d, wait, err := steps.Decision[Claim](s, req)
		if d == nil {
			return wait, err // parks the run until someone decides
		}
		if !d.Approved() {
			return steps.Fail(c, "rejected by "+d.By+": "+d.Reason), nil
		}
		c.ApprovedBy = d.By
		return steps.Next(pay, c), nil
	}).
		Step("pay", func(_ context.Context, _ *steps.Context, c Claim) (steps.Outcome[Claim], error) {
			return steps.Complete(c), nil
		})

	// Each delivery of step 5 gets the decisions recorded for it so far.
	run := func(state string, attempt int, approvals ...checkpoint.Approval) steps.Result {
		s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 5, StepName: "approve", Attempt: attempt, Approvals: approvals})
		res, err := wf.Execute(context.Background(), s, "approve", json.RawMessage(state), false)
		if err != nil {
			panic(err)
		}
		return res
	}

	res := run(`{"amount":1840}`, 1)
	fmt.Println("nobody decided:", res.Kind)

	// The approver shows the parked payload and records the hash of what
	// the adjuster saw with the decision.
	sum, _ := steps.PayloadSHA256(res.Wait.Payload)
	ana := checkpoint.Approval{Step: 5, By: "ana", Decision: checkpoint.DecisionApproved, Channel: "inbox", PayloadSHA256: sum}

	res = run(`{"amount":1840}`, 2, ana)
	fmt.Println("approved:", res.Kind, res.Next, string(res.State))

	// Had the amount changed while the run was parked, ana's decision would
	// not apply to it: the step asks again with the new payload.
	res = run(`{"amount":1900}`, 2, ana)
	fmt.Println("facts changed:", res.Kind)
	// Output:
	// nobody decided: wait
	// approved: next pay {"amount":1840,"approved_by":"ana"}
	// facts changed: wait
}

func ExampleRegistry() {
	done := func(_ context.Context, _ *steps.Context, o Order) (steps.Outcome[Order], error) {
		return steps.Complete(o), nil
	}
	// A worker's main registers every version that may still have runs:
	// a run started on version 1 is only ever executed by version 1.
	reg := steps.NewRegistry().MustRegister(
		steps.New[Order]("orders", 1).Step("ship", done),
		steps.New[Order]("orders", 2).Step("price", done).Step("ship", done),
		steps.New[Order]("refunds", 1).Step("refund", done),
	)

	err := reg.Register(steps.New[Order]("orders", 2).Step("ship", done))
	fmt.Println(err)

	latest, _ := reg.Latest("orders") // what a new run starts on
	fmt.Println("latest:", latest.Name(), latest.Version(), latest.StepNames())
	old, ok := reg.Lookup("orders", 1) // what an old run resumes on
	fmt.Println("lookup:", old.Name(), old.Version(), ok)
	_, ok = reg.Lookup("orders", 3)
	fmt.Println("lookup v3:", ok)
	fmt.Println("names:", reg.Names())
	for _, d := range reg.All() {
		fmt.Printf("%s v%d starts at %s\n", d.Name(), d.Version(), d.FirstStep())
	}
	// Output:
	// workflow orders v2 registered twice
	// latest: orders 2 [price ship]
	// lookup: orders 1 true
	// lookup v3: false
	// names: [orders refunds]
	// orders v1 starts at ship
	// orders v2 starts at price
	// refunds v1 starts at refund
}

func ExampleRetryPolicy_Delay() {
	p := steps.RetryPolicy{Attempts: 6, Backoff: 500 * time.Millisecond, MaxBackoff: 3 * time.Second}
	for attempt := 1; attempt < p.Attempts; attempt++ {
		fmt.Printf("after attempt %d wait %v\n", attempt, p.Delay(attempt))
	}
	// Output:
	// after attempt 1 wait 500ms
	// after attempt 2 wait 1s
	// after attempt 3 wait 2s
	// after attempt 4 wait 3s
	// after attempt 5 wait 3s
}

func ExamplePermanent() {
	errDeclined := errors.New("card declined")
	// A step returns a plain error for what may pass (retried by its
	// policy) and Permanent for what will not (dead-lettered at once).
	err := fmt.Errorf("pay claim-0042: %w", steps.Permanent(errDeclined))
	fmt.Println(steps.IsPermanent(err), errors.Is(err, errDeclined))
	fmt.Println(steps.IsPermanent(errors.New("timeout")))
	// Output:
	// true true
	// false
}

func ExampleEffect() {
	paid := 0 // what the payments provider did, by key
	byKey := map[string]string{}
	// The pay step: one side effect, keyed by the logical step.
	pay := func(ctx context.Context, s *steps.Context) (string, error) {
		return steps.Effect(ctx, s, "pay", 1840, func(ctx context.Context, key string) (string, error) {
			if id, ok := byKey[key]; ok {
				return id, nil // a provider honouring Idempotency-Key
			}
			paid++
			byKey[key] = fmt.Sprintf("pay_%06d", paid)
			return byKey[key], nil
		})
	}

	ctx := context.Background()
	first := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 6, Attempt: 1})
	id, _ := pay(ctx, first)
	fmt.Println("attempt 1:", id, first.Effects()[0].Key, "replayed:", first.Effects()[0].Replayed)

	// The worker died after the payment was journaled, before the step's
	// checkpoint: the redelivery gets the journal back and pays nothing.
	retry := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 6, Attempt: 2, Journal: first.Calls()})
	id, _ = pay(ctx, retry)
	fmt.Println("attempt 2:", id, retry.Effects()[0].Key, "replayed:", retry.Effects()[0].Replayed)
	fmt.Println("payments made:", paid)
	// Output:
	// attempt 1: pay_000001 claim-0042:step6 replayed: false
	// attempt 2: pay_000001 claim-0042:step6 replayed: true
	// payments made: 1
}

func ExampleContext_IdempotencyKey() {
	for attempt := 1; attempt <= 2; attempt++ {
		s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 6, Attempt: attempt})
		// The key names the logical step, so a provider that honours it
		// pays once however often the step is delivered.
		fmt.Println(attempt, s.IdempotencyKey(), s.Key("fee"))
	}
	// Output:
	// 1 claim-0042:step6 claim-0042:step6:fee
	// 2 claim-0042:step6 claim-0042:step6:fee
}

func ExampleContext_PutBlob() {
	// The state keeps a reference, never the document.
	type Claim struct {
		Form blob.Ref `json:"form"`
	}
	ctx := context.Background()
	// The worker passes its blob store (the JetStream Object Store); tests
	// of a workflow can use the in-memory one.
	blobs := blob.NewMemory("DURABLE_BLOBS")

	fetch := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 2, Attempt: 1, BlobStore: blobs})
	pdf := bytes.Repeat([]byte("%PDF claim form "), 1<<16) // 1 MiB
	ref, err := fetch.PutBlob(ctx, "claim-form.pdf", pdf)
	if err != nil {
		fmt.Println(err)
		return
	}
	state, _ := json.Marshal(Claim{Form: ref})
	fmt.Println(ref.Size, "bytes stored,", len(state) < 400, "small state")

	// A later step (any worker, any day) reads the bytes back, verified
	// against the reference's digest.
	assess := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: 1, BlobStore: blobs})
	var c Claim
	_ = json.Unmarshal(state, &c)
	got, err := assess.GetBlob(ctx, c.Form)
	fmt.Println(len(got), err, bytes.Equal(got, pdf))
	// Output:
	// 1048576 bytes stored, true small state
	// 1048576 <nil> true
}

func ExampleWorkflow_Signal() {
	type Shipment struct {
		POD json.RawMessage `json:"pod,omitempty"`
	}
	wf := steps.New[Shipment]("shipment", 1)
	// Only tokens of group carriers (or operators) may send "delivered"
	// through the approver's API; any token may send "cancel".
	delivered := wf.Signal("delivered", "carriers")
	wf.Signal("cancel")
	wf.Step("await", func(_ context.Context, s *steps.Context, st Shipment) (steps.Outcome[Shipment], error) {
		sig, wait, err := steps.Recv(s, delivered, 72*time.Hour)
		if sig == nil {
			return wait, err
		}
		st.POD = sig.Data
		return steps.Complete(st), nil
	})
	fmt.Println(wf.Validate(), wf.SignalNames(), wf.SignalGroups("delivered"), wf.SignalGroups("cancel") == nil)
	// Output: <nil> [delivered cancel] [carriers] true
}

func ExampleWorkflow_InputSchema() {
	type Research struct {
		Sources []string `json:"sources"`
	}
	fetch := func(_ context.Context, _ *steps.Context, st Research) (steps.Outcome[Research], error) {
		return steps.Complete(st), nil
	}
	wf := steps.New[Research]("research", 1).
		InputSchema(`{"type": "object", "required": ["sources"], "properties": {
			"sources": {"type": "array", "minItems": 1, "items": {"type": "string", "format": "uri"}}}}`).
		Step("fetch", fetch)
	fmt.Println(wf.Validate())
	// What `durable start research --input ...` checks before it creates a run.
	fmt.Println(steps.CheckInput(wf.Schema(), json.RawMessage(`{"sources": ["https://a.example/x"]}`)))
	fmt.Println(steps.CheckInput(wf.Schema(), json.RawMessage(`{"sources": [1, "a.example"]}`)))

	// A keyword that would be ignored is a definition error.
	typo := steps.New[Research]("research", 1).
		InputSchema(`{"type": "object", "properties": {"sources": {"type": "array", "minLength": 1}}}`).
		Step("fetch", fetch)
	fmt.Println(typo.Validate())
	// Output:
	// <nil>
	// <nil>
	// input does not match the workflow's input schema: /sources/0: got number, want string; /sources/1: 'a.example' is not valid uri: relative url
	// workflow research: input schema: /properties/sources/minLength: minLength applies to string values only, and type is array
}
