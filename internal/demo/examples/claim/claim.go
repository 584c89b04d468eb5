// Package claim is the example insurance-claim workflow of DESIGN.md: nine
// steps, an adjuster's approval for payouts over 1000 and a payment through
// the demo payments API with the key "<run>:step6".
package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/durable-run/durable/internal/demo/claims"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/pkg/steps"
)

// Name of the workflow; Version of this definition.
const (
	Name    = "claim"
	Version = 1
)

// ApprovalThreshold: payouts above it need an adjuster.
const ApprovalThreshold = 1000

// Input is the run input; every field is optional.
type Input struct {
	Amount      int64  `json:"amount"`
	ApprovalTTL string `json:"approval_ttl"`
	EscalateTo  string `json:"escalate_to"`
}

// State is the claim as it moves through the steps.
type State struct {
	Requested   int64  `json:"requested"`
	ApprovalTTL string `json:"approval_ttl"`
	EscalateTo  string `json:"escalate_to"`
	PolicyID    string `json:"policy_id,omitempty"`
	Coverage    string `json:"coverage,omitempty"`
	Assessment  string `json:"assessment,omitempty"`
	Amount      int64  `json:"amount,omitempty"`
	ApprovedBy  string `json:"approved_by,omitempty"`
	PaymentID   string `json:"payment_id,omitempty"`
	Notified    bool   `json:"notified,omitempty"`
	Closed      bool   `json:"closed,omitempty"`
	Archived    bool   `json:"archived,omitempty"`
}

// Payout is what the adjuster sees and approves.
type Payout struct {
	Claim    string `json:"claim"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Payee    string `json:"payee"`
	Reason   string `json:"reason"`
}

// Config of the workflow.
type Config struct {
	// PaymentsURL is the payments API. Default http://127.0.0.1:8080/demo/payments.
	PaymentsURL string
	// ClaimsURL is the claims system the steps read the amount from
	// (DURABLE_CLAIMS_URL; `durable dev` serves one at /demo/claims).
	// Empty: the amount lives in the run state only.
	ClaimsURL string
	// HTTP client for the payments API and the claims system. Default: 10s timeout.
	HTTP *http.Client
}

// New returns the claim workflow.
func New(cfg Config) *steps.Workflow[State] {
	if cfg.PaymentsURL == "" {
		cfg.PaymentsURL = "http://127.0.0.1:8080/demo/payments"
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	f := &flow{pay: &payments.Client{BaseURL: cfg.PaymentsURL, HTTP: cfg.HTTP}}
	if cfg.ClaimsURL != "" {
		f.claims = &claims.Client{BaseURL: cfg.ClaimsURL, HTTP: cfg.HTTP}
	}
	w := steps.New[State](Name, Version).Init(initState)
	f.to = next{
		verify: w.Ref("verify-policy"), assess: w.Ref("assess-damage"), amount: w.Ref("set-amount"),
		approve: w.Ref("approve-payout"), pay: w.Ref("pay"), notify: w.Ref("notify"),
		close: w.Ref("close"), archive: w.Ref("archive"),
	}
	w.Step("receive", f.receive)
	w.Step("verify-policy", f.verifyPolicy)
	w.Step("assess-damage", f.assess)
	w.Step("set-amount", f.setAmount)
	w.Step("approve-payout", f.approve)
	w.Step("pay", f.payout, steps.WithRetry(steps.RetryPolicy{Attempts: 8, Backoff: 500 * time.Millisecond}))
	w.Step("notify", f.notify)
	w.Step("close", f.close)
	w.Step("archive", f.archive)
	return w
}

// next holds the Refs of the steps the claim's steps go to.
type next struct {
	verify, assess, amount, approve, pay, notify, close, archive steps.Ref[State]
}

func initState(raw json.RawMessage) (State, error) {
	var in Input
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return State{}, err
		}
	}
	st := State{Requested: in.Amount, ApprovalTTL: in.ApprovalTTL, EscalateTo: in.EscalateTo}
	if st.Requested == 0 {
		st.Requested = 1840
	}
	if st.ApprovalTTL == "" {
		st.ApprovalTTL = "72h"
	}
	if st.EscalateTo == "" {
		st.EscalateTo = "supervisors"
	}
	return st, nil
}

type flow struct {
	pay    *payments.Client
	claims *claims.Client // nil: no claims system
	to     next
}

func (f *flow) receive(_ context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	if st.Requested < 0 {
		return steps.Fail(st, fmt.Sprintf("claim %s: negative amount %d", s.RunID(), st.Requested)), nil
	}
	if _, err := time.ParseDuration(st.ApprovalTTL); err != nil {
		return steps.Fail(st, fmt.Sprintf("claim %s: approval_ttl %q is not a Go duration", s.RunID(), st.ApprovalTTL)), nil
	}
	return steps.Next(f.to.verify, st), nil
}

func (f *flow) verifyPolicy(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	// A lookup in the policy system, journaled like any tool call.
	pol, err := steps.Call(ctx, s, "policy-lookup", map[string]string{"claim": s.RunID()}, func(context.Context) (map[string]string, error) {
		return map[string]string{"policy_id": "POL-" + s.RunID(), "coverage": "comprehensive"}, nil
	})
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	st.PolicyID, st.Coverage = pol["policy_id"], pol["coverage"]
	return steps.Next(f.to.assess, st), nil
}

func (f *flow) assess(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	// Stands in for a model call: recorded, never made twice.
	a, err := steps.Call(ctx, s, "damage-model", map[string]any{"claim": s.RunID(), "policy": st.PolicyID}, func(context.Context) (string, error) {
		return "rear bumper and tail light, repairable", nil
	})
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	st.Assessment = a
	return steps.Next(f.to.amount, st), nil
}

func (f *flow) setAmount(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	st.Amount = st.Requested
	if f.claims != nil {
		// Register the claim in the claims system (kept if already there).
		c, err := steps.Call(ctx, s, "register-claim", st.Requested, func(ctx context.Context) (claims.Claim, error) {
			return f.claims.Register(ctx, s.RunID(), st.Requested)
		})
		if err != nil {
			return steps.Outcome[State]{}, err
		}
		st.Amount = c.Amount
	}
	return steps.Next(f.to.approve, st), nil
}

func (f *flow) approve(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	if f.claims != nil {
		// Re-read the facts on every run of this step: after a resume the
		// journal does not replay this read, so an amount edited while the
		// run waited is seen, and the payload no longer matches the approval.
		c, err := steps.Call(ctx, s, "read-claim", s.RunID(), func(ctx context.Context) (claims.Claim, error) {
			return f.claims.Get(ctx, s.RunID())
		})
		if err != nil {
			return steps.Outcome[State]{}, err
		}
		st.Amount = c.Amount
	}
	if st.Amount <= ApprovalThreshold {
		return steps.Next(f.to.pay, st), nil
	}
	ttl, _ := time.ParseDuration(st.ApprovalTTL)
	req := steps.ApprovalRequest{
		Payload:    payoutFor(s.RunID(), st),
		Group:      "adjusters",
		TTL:        ttl,
		OnExpiry:   steps.ExpireEscalate,
		EscalateTo: st.EscalateTo,
	}
	// The step re-reads its facts on every resume: a decision applies only
	// to the payload it was taken on.
	d, err := s.Approval(req)
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	if d == nil {
		return steps.Park[State](req), nil
	}
	if !d.Approved() {
		return steps.Fail(st, fmt.Sprintf("payout rejected by %s: %s", d.By, d.Reason)), nil
	}
	st.ApprovedBy = d.By
	return steps.Next(f.to.pay, st), nil
}

func payoutFor(run string, st State) Payout {
	return Payout{Claim: run, Amount: st.Amount, Currency: "EUR", Payee: "claimant-of-" + run, Reason: st.Assessment}
}

func (f *flow) payout(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	p := payoutFor(s.RunID(), st)
	req := payments.PayRequest{RunID: s.RunID(), Claim: p.Claim, Amount: p.Amount, Currency: p.Currency, Payee: p.Payee}
	res, err := steps.Effect(ctx, s, "pay", req, func(ctx context.Context, key string) (paid, error) {
		pay, replayed, err := f.pay.Pay(ctx, key, req)
		return paid{ID: pay.ID, Replayed: replayed}, err
	})
	if errors.Is(err, payments.ErrConflict) {
		// The key was used for another payout: retrying cannot fix that,
		// and paying under another key could pay twice. A person must look.
		return steps.Outcome[State]{}, steps.Permanent(fmt.Errorf("pay claim %s: %w", s.RunID(), err))
	}
	if err != nil {
		return steps.Outcome[State]{}, fmt.Errorf("pay claim %s: %w", s.RunID(), err)
	}
	st.PaymentID = res.ID
	return steps.Next(f.to.notify, st), nil
}

// paid is the journaled answer of the payments API.
type paid struct {
	ID       string `json:"id"`
	Replayed bool   `json:"replayed"`
}

// ProviderReplayed: the API had seen the key (steps.Replayer).
func (p paid) ProviderReplayed() bool { return p.Replayed }

func (f *flow) notify(_ context.Context, _ *steps.Context, st State) (steps.Outcome[State], error) {
	st.Notified = true
	return steps.Next(f.to.close, st), nil
}

func (f *flow) close(_ context.Context, _ *steps.Context, st State) (steps.Outcome[State], error) {
	st.Closed = true
	return steps.Next(f.to.archive, st), nil
}

func (flow) archive(_ context.Context, _ *steps.Context, st State) (steps.Outcome[State], error) {
	st.Archived = true
	return steps.Complete(st), nil
}
