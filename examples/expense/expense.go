package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// Expense is the run's state: its input ({"amount": N}) and what the
// steps learn.
type Expense struct {
	Amount     int64  `json:"amount"`
	ApprovedBy string `json:"approved_by,omitempty"`
	PaymentID  string `json:"payment_id,omitempty"`
}

// approvalLimit: an amount above it waits for a manager.
const approvalLimit = 100

// workflow is the expense workflow: check, approve (over 100, by group
// managers), pay exactly the amount once.
func workflow(paymentsURL string) *steps.Workflow[Expense] {
	p := payer{url: paymentsURL, http: &http.Client{Timeout: 10 * time.Second}}
	w := steps.New[Expense]("expense", 1)
	pay := w.Ref("pay") // registration fails if no step "pay" is added
	return w.
		Step("approve", approve(pay)).
		Step("pay", p.pay)
}

// approve is the step that checks the amount and sends the expense to
// step next: at once up to approvalLimit, above it once a manager
// approved.
func approve(next steps.Ref[Expense]) steps.StepFunc[Expense] {
	return func(_ context.Context, s *steps.Context, e Expense) (steps.Outcome[Expense], error) {
		if e.Amount <= 0 {
			return steps.Fail(e, fmt.Sprintf("amount must be a positive number, got %d", e.Amount)), nil
		}
		if e.Amount <= approvalLimit {
			return steps.Next(next, e), nil
		}
		req := steps.ApprovalRequest{
			Payload:  map[string]any{"expense": s.RunID(), "amount": e.Amount, "currency": "EUR"},
			Group:    "managers",
			TTL:      72 * time.Hour,
			OnExpiry: steps.ExpireReject,
		}
		d, wait, err := steps.Decision[Expense](s, req)
		if d == nil {
			return wait, err // parks: no worker holds the run while it waits
		}
		if !d.Approved() {
			return steps.Fail(e, fmt.Sprintf("rejected by %s: %s", d.By, d.Reason)), nil
		}
		e.ApprovedBy = d.By
		return steps.Next(next, e), nil
	}
}

type payer struct {
	url  string
	http *http.Client
}

type payment struct {
	ID       string `json:"id"`
	Replayed bool   `json:"replayed"`
}

// ProviderReplayed: the payments API had seen the key (steps.Replayer).
func (p payment) ProviderReplayed() bool { return p.Replayed }

// pay pays the amount once. steps.Effect hands over the step's idempotency
// key ("<run>:step2"), the same on every attempt, so a retry after a crash
// is answered by the provider instead of paying again; the answer is
// journaled, so a retry after the journal does not call at all.
func (p payer) pay(ctx context.Context, s *steps.Context, e Expense) (steps.Outcome[Expense], error) {
	body := map[string]any{"run_id": s.RunID(), "amount": e.Amount, "currency": "EUR", "payee": "employee-of-" + s.RunID()}
	res, err := steps.Effect(ctx, s, "pay", body, func(ctx context.Context, key string) (payment, error) {
		return p.post(ctx, key, body)
	})
	if err != nil {
		return steps.Outcome[Expense]{}, err
	}
	e.PaymentID = res.ID
	return steps.Complete(e), nil
}

func (p payer) post(ctx context.Context, key string, body any) (payment, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return payment{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(b))
	if err != nil {
		return payment{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := p.http.Do(req)
	if err != nil {
		return payment{}, fmt.Errorf("pay %s: %w", key, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated {
		err := fmt.Errorf("pay %s: payments API answered %s", key, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
			return payment{}, steps.Permanent(err) // the same request will not succeed later
		}
		return payment{}, err
	}
	var out payment
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return payment{}, fmt.Errorf("pay %s: %w", key, err)
	}
	out.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return out, nil
}
