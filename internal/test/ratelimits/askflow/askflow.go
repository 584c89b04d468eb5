// Package askflow is the workflow of the rate-limit tests
// (internal/test/ratelimits): one step asks a model through model.Call
// with steps.Resource(Resource), so every call takes a token of the
// fleet-wide limit of that name first.
package askflow

import (
	"context"

	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// Name is the workflow's name; Resource the limit its calls take tokens of.
const (
	Name     = "ask"
	Resource = "model"
)

// State is the run's state: the model's answer.
type State struct {
	Answer string `json:"answer,omitempty"`
}

// Workflow asks m once per run. One attempt only: a rate-limit answer
// must hand the step back, never use up an attempt (a second failure
// would dead-letter the run).
func Workflow(m model.Model) *steps.Workflow[State] {
	return steps.New[State](Name, 1).
		Step("ask", func(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
			req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "Hello from " + s.RunID()}}}
			res, err := model.Call(ctx, s, "ask", m, req, steps.Resource(Resource))
			if err != nil {
				return steps.Outcome[State]{}, err
			}
			st.Answer = res.Text
			return steps.Complete(st), nil
		}, steps.WithRetry(steps.RetryPolicy{Attempts: 1}))
}
