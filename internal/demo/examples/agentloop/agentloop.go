// Package agentloop is an example agent loop whose next step the "model"
// decides: think, then act with a tool, until the model answers. The model
// and the tool are stand-ins (deterministic, offline); every call goes
// through the journal, so a resumed loop never calls either twice.
package agentloop

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/durable-run/durable/pkg/steps"
)

// Name and Version of the workflow.
const (
	Name    = "agent-loop"
	Version = 1
)

// Input: all optional.
type Input struct {
	// Turns the model takes before it answers. Default 4, at most 40.
	Turns int `json:"turns"`
}

// State is the conversation so far, kept small: tool results are summaries.
type State struct {
	Turns   int      `json:"turns"`
	Turn    int      `json:"turn"`
	History []string `json:"history"`
	Answer  string   `json:"answer,omitempty"`
}

// decision is what the stand-in model returns.
type decision struct {
	Action string `json:"action"` // "tool" or "answer"
	Tool   string `json:"tool,omitempty"`
	Text   string `json:"text,omitempty"`
}

// New returns the workflow, capped at 100 steps.
func New() *steps.Workflow[State] {
	w := steps.New[State](Name, Version).
		WithCaps(steps.Caps{MaxSteps: 100}).
		Init(func(raw json.RawMessage) (State, error) {
			var in Input
			if len(raw) > 0 {
				if err := json.Unmarshal(raw, &in); err != nil {
					return State{}, err
				}
			}
			if in.Turns <= 0 {
				in.Turns = 4
			}
			return State{Turns: min(in.Turns, 40)}, nil
		})
	l := &loop{think: w.Ref("think"), act: w.Ref("act"), answer: w.Ref("answer")}
	return w.Step("think", l.thinkStep).
		Step("act", l.actStep).
		Step("answer", answer)
}

// loop holds the steps' Refs: where think and act go.
type loop struct{ think, act, answer steps.Ref[State] }

func (l *loop) thinkStep(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	d, err := steps.Call(ctx, s, "model", st.History, func(context.Context) (decision, error) {
		if st.Turn >= st.Turns {
			return decision{Action: "answer", Text: fmt.Sprintf("done after %d tool calls", st.Turn)}, nil
		}
		return decision{Action: "tool", Tool: "lookup"}, nil
	})
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	if d.Action == "answer" {
		st.Answer = d.Text
		return steps.Next(l.answer, st), nil
	}
	return steps.Next(l.act, st), nil
}

func (l *loop) actStep(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	out, err := steps.Call(ctx, s, "tool:lookup", st.Turn, func(context.Context) (string, error) {
		return fmt.Sprintf("lookup #%d ok (key %s)", st.Turn+1, s.IdempotencyKey()), nil
	})
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	st.Turn++
	st.History = append(st.History, out)
	return steps.Next(l.think, st), nil
}

func answer(_ context.Context, _ *steps.Context, st State) (steps.Outcome[State], error) {
	return steps.Complete(st), nil
}
