// Package refundagent is the example agent of the reference worker: a
// support agent that looks up an order, decides on a refund, asks a
// supervisor's approval for refunds over RefundApprovalThreshold, and pays
// the refund through the demo payments API with the step's idempotency key.
//
// The model decides each step. Offline (no provider key in the
// environment) it is a model.Script replaying testdata/transcript.json, a
// recorded conversation about order A-1001; with ANTHROPIC_API_KEY (or
// OPENAI_API_KEY) set it is that provider's model.
package refundagent

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/model/anthropic"
	"github.com/durable-run/durable/pkg/model/openai"
	"github.com/durable-run/durable/pkg/steps"
)

// Name and Version of the workflow.
const (
	Name    = "refund-agent"
	Version = 1
)

// RefundApprovalThreshold: refunds above it (EUR) need a supervisor.
const RefundApprovalThreshold = 100

// ApprovalGroup decides on large refunds and on going over budget.
const ApprovalGroup = "supervisors"

// System is the agent's instructions.
const System = `You are a support agent of an online shop. Look up the order before deciding anything.
Refund at most the amount the customer paid, and only for goods that arrived damaged or never arrived.
Refunds over 100 EUR need a supervisor's approval: call the refund tool anyway; the system asks for approval and tells you the outcome.
Answer the customer briefly once done.`

//go:embed testdata/transcript.json
var transcript []byte

// Input of a run (all optional).
type Input struct {
	// OrderID defaults to A-1001.
	OrderID string `json:"order_id"`
	// Message is the customer's request.
	Message string `json:"message"`
}

// Order is what lookup_order returns.
type Order struct {
	ID       string `json:"order_id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// Orders is the demo shop's order book.
var Orders = map[string]Order{
	"A-1001": {ID: "A-1001", Customer: "cust-7", Item: "blender", Amount: 149, Currency: "EUR", Status: "delivered"},
	"A-1002": {ID: "A-1002", Customer: "cust-9", Item: "headphones", Amount: 59, Currency: "EUR", Status: "delivered"},
	"A-1003": {ID: "A-1003", Customer: "cust-3", Item: "sofa", Amount: 899, Currency: "EUR", Status: "in transit"},
}

// RefundArgs are the refund tool's arguments.
type RefundArgs struct {
	OrderID string `json:"order_id"`
	Amount  int64  `json:"amount"`
	Reason  string `json:"reason"`
}

// Refunded is the refund tool's result.
type Refunded struct {
	PaymentID string `json:"payment_id"`
	OrderID   string `json:"order_id"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Replayed  bool   `json:"replayed,omitempty"`
}

// ProviderReplayed implements agent.Replayer.
func (r Refunded) ProviderReplayed() bool { return r.Replayed }

// Config of the workflow.
type Config struct {
	// PaymentsURL of the payments API (default http://127.0.0.1:8080/demo/payments).
	PaymentsURL string
	HTTP        *http.Client
	// Model, ModelName: default ModelFromEnv.
	Model     model.Model
	ModelName string
	Prices    agent.Prices
	Budget    agent.Budget
}

// DefaultBudget bounds a run: a support conversation takes a handful of
// steps; going on past the budget takes a supervisor's approval.
var DefaultBudget = agent.Budget{MaxSteps: 30, MaxTokens: 100_000, OnReach: agent.Park, Group: ApprovalGroup}

// New returns the workflow.
func New(cfg Config) *steps.Workflow[agent.State] {
	if cfg.PaymentsURL == "" {
		cfg.PaymentsURL = "http://127.0.0.1:8080/demo/payments"
	}
	if cfg.Model == nil {
		cfg.Model, cfg.ModelName = ModelFromEnv()
	}
	if cfg.Budget == (agent.Budget{}) {
		cfg.Budget = DefaultBudget
	}
	pay := payments.Client{BaseURL: cfg.PaymentsURL, HTTP: cfg.HTTP}
	return agent.New(agent.Config{
		Name: Name, Version: Version,
		Model: cfg.Model, ModelName: cfg.ModelName, Prices: cfg.Prices,
		System: System,
		Tools:  []*agent.Tool{LookupOrder(), Refund(pay)},
		Budget: cfg.Budget,
		Prompt: prompt,
	})
}

func prompt(raw json.RawMessage) (string, error) {
	var in Input
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return "", fmt.Errorf("refund-agent input: %w", err)
		}
	}
	if in.OrderID == "" {
		in.OrderID = "A-1001"
	}
	if in.Message == "" {
		in.Message = "The blender I ordered arrived broken. I'd like my money back."
	}
	return fmt.Sprintf("Customer message about order %s:\n%s", in.OrderID, in.Message), nil
}

// LookupOrder reads an order from the order book.
func LookupOrder() *agent.Tool {
	return agent.NewTool("lookup_order", "Look up an order by its id: customer, item, amount paid, delivery status.",
		`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`,
		func(_ context.Context, _ agent.Key, a struct {
			OrderID string `json:"order_id"`
		}) (Order, error) {
			o, ok := Orders[a.OrderID]
			if !ok {
				return Order{}, agent.Refuse(fmt.Errorf("no order %q", a.OrderID))
			}
			return o, nil
		})
}

// Refund pays a refund through the payments API, keyed by the step: a
// retried or resumed step presents the same key and nobody is paid twice.
// Refunds over RefundApprovalThreshold park the run for a supervisor, with
// the exact call as the payload.
func Refund(pay payments.Client) *agent.Tool {
	return agent.NewTool("refund", "Refund (part of) an order to the customer. Amount in the order's currency, at most what was paid.",
		`{"type":"object","properties":{"order_id":{"type":"string"},"amount":{"type":"integer"},"reason":{"type":"string"}},"required":["order_id","amount","reason"]}`,
		func(ctx context.Context, key agent.Key, a RefundArgs) (Refunded, error) {
			o, ok := Orders[a.OrderID]
			switch {
			case !ok:
				return Refunded{}, agent.Refuse(fmt.Errorf("no order %q", a.OrderID))
			case a.Amount <= 0 || a.Amount > o.Amount:
				return Refunded{}, agent.Refuse(fmt.Errorf("refund of %d: the order was paid %d %s", a.Amount, o.Amount, o.Currency))
			}
			p, replayed, err := pay.Pay(ctx, string(key), payments.PayRequest{RunID: runOf(key), Claim: o.ID, Amount: a.Amount, Currency: o.Currency, Payee: o.Customer})
			if errors.Is(err, payments.ErrConflict) {
				// The key paid something else: paying under another key
				// could pay twice. A person must look.
				return Refunded{}, steps.Permanent(err)
			}
			if err != nil {
				return Refunded{}, err
			}
			return Refunded{PaymentID: p.ID, OrderID: o.ID, Amount: p.Amount, Currency: p.Currency, Replayed: replayed}, nil
		}).
		Effect().
		NeedsApproval(agent.Approval{Group: ApprovalGroup, When: func(args json.RawMessage) (bool, error) {
			var a RefundArgs
			if err := json.Unmarshal(args, &a); err != nil {
				return true, nil // the tool refuses it; nothing is paid unseen
			}
			return a.Amount > RefundApprovalThreshold, nil
		}})
}

// runOf is the run id of a key "<run>:step<n>".
func runOf(k agent.Key) string {
	s := string(k)
	if i := strings.LastIndex(s, ":step"); i >= 0 {
		return s[:i]
	}
	return s
}

// ModelFromEnv is the provider named by the environment: Anthropic with
// ANTHROPIC_API_KEY (ANTHROPIC_MODEL, default claude-sonnet-4-5), OpenAI
// with OPENAI_API_KEY (OPENAI_MODEL, default gpt-4o), else the recorded
// transcript. A provider that cannot be configured answers every call
// with the configuration error (the run dead-letters saying why).
func ModelFromEnv() (model.Model, string) {
	switch {
	case os.Getenv("ANTHROPIC_API_KEY") != "":
		c := model.ConfigFromEnv("ANTHROPIC")
		if c.Model == "" {
			c.Model = "claude-sonnet-4-5"
		}
		m, err := anthropic.New(c)
		return orBroken(m, err), c.Model
	case os.Getenv("OPENAI_API_KEY") != "":
		c := model.ConfigFromEnv("OPENAI")
		if c.Model == "" {
			c.Model = "gpt-4o"
		}
		m, err := openai.New(c)
		return orBroken(m, err), c.Model
	}
	s, err := Transcript()
	if err != nil {
		return broken{err}, "scripted"
	}
	return s, s.Model
}

// Transcript is the recorded conversation the offline model replays.
func Transcript() (*model.Script, error) { return model.LoadScript(transcript) }

func orBroken(m model.Model, err error) model.Model {
	if err != nil {
		return broken{err}
	}
	return m
}

type broken struct{ err error }

func (b broken) Complete(context.Context, model.Request) (model.Response, error) {
	return model.Response{}, steps.Permanent(b.err)
}
