// Package fanout is the reference fan-out workflow: N branches each pay
// 1 EUR through the payments API under their own idempotency key
// ("<run>:step2.<i>"), in parallel on any worker; the join sums what was
// paid and completes.
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// Name and Version of the workflow.
const (
	Name    = "fanout"
	Version = 1
	// DefaultBranches when the input names none.
	DefaultBranches = 8
)

// Input of a run: {"branches": N}, 1 to checkpoint.MaxBranches.
type Input struct {
	Branches int `json:"branches"`
}

// State of a run. Paid is the sum of the branches' payments, in EUR.
type State struct {
	Branches int   `json:"branches"`
	Paid     int64 `json:"paid"`
	Replayed int   `json:"replayed,omitempty"`
}

// Pay is a branch's input: its place in the fan-out.
type Pay struct {
	I int `json:"i"`
}

// Paid is a branch's output: the payment the API recorded.
type Paid struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Replayed bool   `json:"replayed"`
}

// ProviderReplayed: the API had seen the key (steps.Replayer).
func (p Paid) ProviderReplayed() bool { return p.Replayed }

// Config of the workflow.
type Config struct {
	// PaymentsURL is the payments API. Default http://127.0.0.1:8080/demo/payments.
	PaymentsURL string
	// HTTP client for the payments API. Default: 10s timeout.
	HTTP *http.Client
}

// New returns the fanout workflow.
func New(cfg Config) *steps.Workflow[State] {
	if cfg.PaymentsURL == "" {
		cfg.PaymentsURL = "http://127.0.0.1:8080/demo/payments"
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	pay := payments.Client{BaseURL: cfg.PaymentsURL, HTTP: cfg.HTTP}
	w := steps.New[State](Name, Version).
		Init(initState).
		InputSchema(`{"type": "object", "additionalProperties": false, "properties": {
			"branches": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "branches to run, default 8"}}}`)
	f := &fan{sum: w.Ref("sum")}
	f.payOne = steps.AddBranch(w, "pay-one", func(ctx context.Context, s *steps.Context, in Pay) (Paid, error) {
		return payOne(ctx, s, pay, in)
	})
	w.Step("split", f.split)
	w.Step("sum", f.sumUp)
	return w
}

// fan holds the Refs the steps go to: the branch step and the join.
type fan struct {
	payOne steps.BranchRef[Pay, Paid]
	sum    steps.Ref[State]
}

func initState(raw json.RawMessage) (State, error) {
	var in Input
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return State{}, err
		}
	}
	st := State{Branches: in.Branches}
	if st.Branches == 0 {
		st.Branches = DefaultBranches
	}
	return st, nil
}

func (f *fan) split(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	if st.Branches < 1 || st.Branches > checkpoint.MaxBranches {
		return steps.Fail(st, fmt.Sprintf("branches must be 1 to %d, got %d", checkpoint.MaxBranches, st.Branches)), nil
	}
	bs := make([]steps.Branch, st.Branches)
	for i := range bs {
		bs[i] = f.payOne.With(Pay{I: i + 1})
	}
	return steps.FanOut(f.sum, st, bs...), nil
}

func payOne(ctx context.Context, s *steps.Context, pay payments.Client, in Pay) (Paid, error) {
	req := payments.PayRequest{RunID: s.RunID(), Claim: fmt.Sprintf("%s-%d", s.RunID(), in.I), Amount: 1, Currency: "EUR", Payee: fmt.Sprintf("payee-%d", in.I)}
	res, err := steps.Effect(ctx, s, "pay", req, func(ctx context.Context, key string) (Paid, error) {
		p, replayed, err := pay.Pay(ctx, key, req)
		return Paid{ID: p.ID, Amount: p.Amount, Replayed: replayed}, err
	})
	if errors.Is(err, payments.ErrConflict) {
		return Paid{}, steps.Permanent(fmt.Errorf("pay branch %d: %w", in.I, err))
	}
	return res, err
}

func (f *fan) sumUp(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	paid, err := f.payOne.Outputs(s)
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	for _, p := range paid {
		st.Paid += p.Amount
		if p.Replayed {
			st.Replayed++
		}
	}
	return steps.Complete(st), nil
}
