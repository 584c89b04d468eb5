package agent

import (
	"context"
	"fmt"
	"strings"

	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// branchCall is the input of a tool-call branch: the call, and the
// rejection to tell the model instead when its approval was refused.
type branchCall struct {
	Call     model.ToolCall `json:"call"`
	Rejected string         `json:"rejected,omitempty"`
}

// fanOut is the tool step of a loop with ParallelTools: every pending call
// becomes a branch, after the gated ones were decided, one at a time.
func (l *loop) fanOut(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	if o, ok, err := l.gateWith(s.ApprovalOf, s, &st, false); !ok {
		return o, err
	}
	if len(st.Pending) == 0 {
		return steps.Next(l.model, st), nil
	}
	branches := make([]steps.Branch, len(st.Pending))
	for i, call := range st.Pending {
		in := branchCall{Call: call}
		if tool := l.tools[call.Name]; tool != nil {
			// The key the call will run with, in branch i+1 of the
			// fan-out joined at the next step.
			key := Key(fmt.Sprintf("%s:step%d.%d", s.RunID(), s.Step()+1, i+1))
			wait, rejected, err := approveOf(s, tool, call, key)
			if err != nil {
				return steps.Outcome[State]{}, err
			}
			if wait != nil {
				return steps.Park[State](*wait), nil
			}
			in.Rejected = rejected
		}
		branches[i] = l.toolCall.With(in)
	}
	return steps.FanOut(l.toolJoin, st, branches...), nil
}

// callOne is a tool-call branch: it runs one call with the branch's key.
func (l *loop) callOne(ctx context.Context, s *steps.Context, in branchCall) (Result, error) {
	call := in.Call
	tool := l.tools[call.Name]
	switch {
	case tool == nil:
		return Result{CallID: call.ID, Tool: call.Name, IsError: true,
			Content: fmt.Sprintf("%v: %q (the tools are %s)", errNoSuchTool, call.Name, strings.Join(l.toolNames(), ", "))}, nil
	case in.Rejected != "":
		return Result{CallID: call.ID, Tool: call.Name, Content: in.Rejected, IsError: true}, nil
	}
	key := Key(s.IdempotencyKey())
	rec, err := steps.CallNoted(ctx, s, "tool:"+call.Name, call.Args, func(ctx context.Context) (record, error) {
		return l.run(ctx, s, tool, call, key)
	}, func(r record) string { return describe(call.Name, key, r) })
	if err != nil {
		return Result{}, fmt.Errorf("tool %s (%s): %w", call.Name, key, err)
	}
	if tool.effect {
		s.RecordEffect(string(key), rec.Replayed || s.Replayed("tool:"+call.Name))
	}
	return rec.Result, nil
}

// join collects the branches' results in call order, counts each call
// once, and goes back to the model.
func (l *loop) join(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	results, err := l.toolCall.Outputs(s)
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	st.Usage.ToolCalls += len(results)
	st.Pending, st.Done = nil, nil
	st.History.Append(Entry{Role: model.RoleUser, Results: results})
	if err := st.History.seal(ctx, s, l.cfg.TailLimit); err != nil {
		return steps.Outcome[State]{}, err
	}
	return steps.Next(l.model, st), nil
}

// approveOf is approve for one of several gated calls of one step: each
// call's decision is found by its own payload, so deciding one does not
// hide the decision on another.
func approveOf(s *steps.Context, tool *Tool, call model.ToolCall, key Key) (*steps.ApprovalRequest, string, error) {
	return approveWith(s.ApprovalOf, s, tool, call, key)
}
