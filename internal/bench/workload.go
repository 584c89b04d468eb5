package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// Workflow is the name of the claims-9 workflow; WorkflowVersion its version.
const (
	Workflow        = "claims9"
	WorkflowVersion = 1
)

// StepNames are the nine steps of a claims-9 run, in order.
var StepNames = []string{
	"intake", "verify_policy", "check_coverage", "assess", "approve",
	"pay", "notify", "close", "archive",
}

// StepsPerRun is the number of steps of a claims-9 run.
const StepsPerRun = 9

// State is the claims-9 state, about 200 bytes of JSON: the run id, the
// step counter, an amount and a few string fields. Step bodies do no real
// work: each advances the counter and rewrites the fields, so every
// checkpoint differs from the one before.
type State struct {
	RunID    string `json:"run_id"`
	Step     int    `json:"step"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	PolicyID string `json:"policy_id"`
	Status   string `json:"status"`
	Note     string `json:"note"`
}

// Initial is the state a run starts from (its input).
func Initial(runID string) State {
	return State{
		RunID: runID, Amount: 1840, Currency: "EUR", PolicyID: "POL-2024-000042",
		Status: "received", Note: "water damage, kitchen; photos attached; adjuster not yet assigned",
	}
}

// Advance is the body of step n (1-based): the same pure function for
// durable's workflow and the floor's handler.
func Advance(s State, n int) State {
	s.Step = n
	s.Status = StepNames[n-1]
	s.Amount += int64(n)
	return s
}

// Input is the run input of run id, as JSON.
func Input(runID string) json.RawMessage {
	b, err := json.Marshal(Initial(runID))
	if err != nil {
		panic(err) // a fixed struct of strings and ints always encodes
	}
	return b
}

// FlowResource is the resource every claims-9 step uses (steps.Uses): with
// no limit set on it (the bench's default), it costs a map lookup a step;
// `durable bench --flow-limit N` measures a limit of N on it.
const FlowResource = "bench-model"

// Registry holds only the claims-9 workflow.
func Registry() *steps.Registry {
	wf := steps.New[State](Workflow, WorkflowVersion)
	refs := make([]steps.Ref[State], len(StepNames))
	for i, name := range StepNames {
		refs[i] = wf.Ref(name)
	}
	for i, name := range StepNames {
		n := i + 1
		wf.Step(name, func(_ context.Context, _ *steps.Context, s State) (steps.Outcome[State], error) {
			s = Advance(s, n)
			if n == StepsPerRun {
				return steps.Complete(s), nil
			}
			return steps.Next(refs[n], s), nil
		}, steps.Uses(FlowResource))
	}
	return steps.NewRegistry().MustRegister(wf)
}

// runID names run i of a phase (letters, digits and '-': a subject
// token and a store key).
func runID(phase string, i int) string { return fmt.Sprintf("%s-%06d", phase, i) }

// ParkWorkflow is the one-step workflow of the waiting-at-scale phase: its
// step asks for an approval and parks the run; ParkWorkflowVersion its
// version.
const (
	ParkWorkflow        = "bench-park"
	ParkWorkflowVersion = 1
	// parkGroup may decide a bench-park approval.
	parkGroup = "adjusters"
)

// ParkState is a bench-park run's state (its input): the approval's TTL
// travels in it so that each phase chooses its own.
type ParkState struct {
	RunID  string `json:"run_id"`
	Amount int64  `json:"amount"`
	TTLMS  int64  `json:"ttl_ms"`
}

// ParkPayload is what the approver of a bench-park run sees: small, as a
// real payout request is.
type ParkPayload struct {
	RunID  string `json:"run_id"`
	Amount int64  `json:"amount"`
	Reason string `json:"reason"`
}

// ParkInput is the input of bench-park run id, whose approval expires
// after ttl (rejected: the default policy).
func ParkInput(id string, ttl time.Duration) json.RawMessage {
	b, err := json.Marshal(ParkState{RunID: id, Amount: 1840, TTLMS: ttl.Milliseconds()})
	if err != nil {
		panic(err) // a fixed struct of strings and ints always encodes
	}
	return b
}

// ParkRegistry holds only the bench-park workflow. Its step parks the run
// until a decision: approved completes the run, rejected (an expiry
// included) fails it.
func ParkRegistry() *steps.Registry {
	wf := steps.New[ParkState](ParkWorkflow, ParkWorkflowVersion)
	wf.Step("approve", func(_ context.Context, s *steps.Context, st ParkState) (steps.Outcome[ParkState], error) {
		req := steps.ApprovalRequest{
			Payload: ParkPayload{RunID: st.RunID, Amount: st.Amount, Reason: "payout over 1000"},
			Group:   parkGroup, TTL: time.Duration(st.TTLMS) * time.Millisecond, OnExpiry: steps.ExpireReject,
		}
		d, wait, err := steps.Decision[ParkState](s, req)
		switch {
		case d == nil:
			return wait, err
		case !d.Approved():
			return steps.Fail(st, "approval rejected: "+d.Reason), nil
		}
		return steps.Complete(st), nil
	})
	return steps.NewRegistry().MustRegister(wf)
}

// The fan-out phase's workflows: bench-fanout runs N no-op branches in
// parallel and joins them; bench-linear runs N no-op steps one after the
// other. The same work, N step bodies, in parallel and in line.
const (
	FanOutWorkflow = "bench-fanout"
	LinearWorkflow = "bench-linear"
)

// SpreadState is the state of both: N steps or branches, Done counted;
// each step or branch body waits WorkMS (a model or API call's latency:
// the work fan-out is for), or does nothing.
type SpreadState struct {
	N      int `json:"n"`
	WorkMS int `json:"work_ms,omitempty"`
	Done   int `json:"done"`
}

// work waits ms milliseconds, or until ctx ends.
func work(ctx context.Context, ms int) error {
	if ms <= 0 {
		return nil
	}
	return sleep(ctx, time.Duration(ms)*time.Millisecond)
}

// FanOutRegistry holds bench-fanout and bench-linear.
func FanOutRegistry() *steps.Registry {
	fan := steps.New[SpreadState](FanOutWorkflow, 1)
	join := fan.Ref("join")
	leaf := steps.AddBranch(fan, "leaf", func(ctx context.Context, _ *steps.Context, in SpreadState) (int, error) {
		return in.N, work(ctx, in.WorkMS)
	})
	fan.Step("split", func(_ context.Context, _ *steps.Context, st SpreadState) (steps.Outcome[SpreadState], error) {
		bs := make([]steps.Branch, st.N)
		for i := range bs {
			bs[i] = leaf.With(SpreadState{N: i + 1, WorkMS: st.WorkMS})
		}
		return steps.FanOut(join, st, bs...), nil
	})
	fan.Step("join", func(_ context.Context, s *steps.Context, st SpreadState) (steps.Outcome[SpreadState], error) {
		outs, err := leaf.Outputs(s)
		if err != nil {
			return steps.Outcome[SpreadState]{}, err
		}
		st.Done = len(outs)
		return steps.Complete(st), nil
	})
	line := steps.New[SpreadState](LinearWorkflow, 1)
	step := line.Ref("step")
	line.Step("step", func(ctx context.Context, _ *steps.Context, st SpreadState) (steps.Outcome[SpreadState], error) {
		if err := work(ctx, st.WorkMS); err != nil {
			return steps.Outcome[SpreadState]{}, err
		}
		st.Done++
		if st.Done >= st.N {
			return steps.Complete(st), nil
		}
		return steps.Next(step, st), nil
	})
	return steps.NewRegistry().MustRegister(fan, line)
}
