package refundagent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/pkg/agent"
)

// Reconciler compares the refunds a run's log recorded with the payments
// API: a refund logged but not paid (or paid otherwise), and a payment
// under one of the run's keys that the log never recorded.
type Reconciler struct{ Pay payments.Client }

var _ agent.Reconciler = Reconciler{}

// Tool implements agent.Reconciler.
func (Reconciler) Tool() string { return "refund" }

// Check implements agent.Reconciler.
func (r Reconciler) Check(ctx context.Context, e agent.LogEntry) (string, error) {
	var logged Refunded
	if err := json.Unmarshal([]byte(e.Content), &logged); err != nil {
		return fmt.Sprintf("the log's result is not a refund: %v", err), nil
	}
	ps, err := r.Pay.List(ctx, payments.WithKey(string(e.Key)))
	if err != nil {
		return "", err
	}
	switch {
	case len(ps) == 0:
		return fmt.Sprintf("the log records refund %s of %d %s; the payments API has no payment with this key", logged.PaymentID, logged.Amount, logged.Currency), nil
	case ps[0].ID != logged.PaymentID || ps[0].Amount != logged.Amount || ps[0].Currency != logged.Currency:
		return fmt.Sprintf("the log records %s of %d %s; the payments API holds %s of %d %s", logged.PaymentID, logged.Amount, logged.Currency, ps[0].ID, ps[0].Amount, ps[0].Currency), nil
	}
	return "", nil
}

// Keys implements agent.Reconciler.
func (r Reconciler) Keys(ctx context.Context, run string) ([]agent.Key, error) {
	ps, err := r.Pay.List(ctx, payments.WithRunID(run))
	if err != nil {
		return nil, err
	}
	keys := make([]agent.Key, len(ps))
	for i, p := range ps {
		keys[i] = agent.Key(p.Key)
	}
	return keys, nil
}
