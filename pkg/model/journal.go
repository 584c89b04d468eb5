package model

import (
	"context"
	"fmt"
	"strings"

	"github.com/durable-run/durable/pkg/steps"
)

// Recorded is a model call as the step's journal keeps it: the response,
// and what it was asked with.
type Recorded struct {
	Response Response `json:"response"`
	// Asked is the model the request named (empty: the adapter's default).
	Asked      string `json:"asked,omitempty"`
	PromptHash string `json:"prompt_sha256"`
	ToolsHash  string `json:"tools_sha256"`
}

// Result is a journaled model call's answer.
type Result struct {
	Response
	// Replayed: an earlier attempt of the step made the call; this is its
	// recorded response and the model was not called again.
	Replayed bool
	// Changed names what differs between the recorded call and this one
	// ("model", "tools"), when Replayed: the code or configuration changed
	// since the run made the call. The recording is still what the run
	// continues with; say so to whoever watches the run.
	Changed []string
}

// Call makes the model call name of the step through its journal: the
// first attempt calls m and records the response before the step goes on;
// a retried or resumed attempt gets the recording and never calls the
// model again (a model is not deterministic, and each call costs). The
// conversation (system prompt and messages) identifies the call: another
// conversation under the same name is steps.ErrJournalMismatch. A changed
// model or tool set is reported in Result.Changed, not refused.
//
// steps.Resource("anthropic") among opts makes the call take a token of
// the fleet-wide rate limit of that name first, and slows the limit down
// for the whole fleet when the provider answers 429 (Error.RateLimited):
// the step is then handed back to the queue for the provider's
// Retry-After, not retried as a failure.
func Call(ctx context.Context, s *steps.Context, name string, m Model, req Request, opts ...steps.CallOption) (Result, error) {
	prompt, err := PromptHash(req)
	if err != nil {
		return Result{}, fmt.Errorf("model call %s: %w", name, err)
	}
	tools, err := ToolsHash(req.Tools)
	if err != nil {
		return Result{}, fmt.Errorf("model call %s: %w", name, err)
	}
	rec, err := steps.CallNoted(ctx, s, name, prompt, func(ctx context.Context) (Recorded, error) {
		resp, err := m.Complete(ctx, req)
		if err != nil {
			return Recorded{}, err
		}
		return Recorded{Response: resp, Asked: req.Model, PromptHash: prompt, ToolsHash: tools}, nil
	}, func(r Recorded) string { return Describe(r.Response) }, opts...)
	if err != nil {
		return Result{}, err
	}
	// Replayed also when this attempt called but a concurrent attempt
	// recorded first: the run continues with that recording.
	res := Result{Response: rec.Response, Replayed: s.Replayed(name)}
	if res.Replayed {
		if rec.Asked != req.Model {
			res.Changed = append(res.Changed, "model")
		}
		if rec.ToolsHash != tools {
			res.Changed = append(res.Changed, "tools")
		}
	}
	return res, nil
}

// Describe is a one-line account of a response, as `durable runs show`
// prints a model call: "claude-x: 812 in + 95 out tokens, calls refund".
func Describe(r Response) string {
	var b strings.Builder
	if r.Model != "" {
		b.WriteString(r.Model + ": ")
	}
	fmt.Fprintf(&b, "%d in + %d out tokens, ", r.Usage.InputTokens, r.Usage.OutputTokens)
	if len(r.ToolCalls) > 0 {
		names := make([]string, len(r.ToolCalls))
		for i, c := range r.ToolCalls {
			names[i] = c.Name
		}
		b.WriteString("calls " + strings.Join(names, ", "))
		return b.String()
	}
	b.WriteString("answers")
	if r.StopReason != "" && r.StopReason != StopEndTurn {
		b.WriteString(" (" + string(r.StopReason) + ")")
	}
	return b.String()
}
