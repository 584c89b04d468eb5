package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// scripted answers from a list and counts the calls it gets.
type scripted struct {
	answers []model.Response
	calls   int
}

func (m *scripted) Complete(_ context.Context, _ model.Request) (model.Response, error) {
	m.calls++
	if m.calls > len(m.answers) {
		return model.Response{}, errors.New("scripted model: no answer left")
	}
	return m.answers[m.calls-1], nil
}

func ask(tools string) model.Request {
	return model.Request{Model: "model-a", System: "refund agent", Messages: []model.Message{{Role: model.RoleUser, Text: "refund order 42"}},
		Tools: []model.ToolDef{{Name: "lookup_order", Schema: json.RawMessage(tools)}}}
}

// The first attempt calls the model and journals the answer; an attempt
// after a crash (the journal of the step handed back by the store) gets the
// recording without calling the model, and is told what changed since.
func TestModelCallsGoThroughTheJournal(t *testing.T) {
	ctx := context.Background()
	answer := model.Response{Model: "model-a-2026", StopReason: model.StopToolUse, Usage: model.Usage{InputTokens: 120, OutputTokens: 30},
		ToolCalls: []model.ToolCall{{ID: "t1", Name: "lookup_order", Args: json.RawMessage(`{"id":"42"}`)}}}
	m := &scripted{answers: []model.Response{answer}}
	first := steps.NewContext(steps.ContextConfig{RunID: "refund-1", Step: 3, Attempt: 1})
	res, err := model.Call(ctx, first, "decide", m, ask(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.calls != 1 || res.Replayed || res.ToolCalls[0].Name != "lookup_order" || res.Usage.InputTokens != 120 {
		t.Fatalf("first attempt: %d calls, %+v", m.calls, res)
	}
	journal := first.Calls()
	if len(journal) != 1 {
		t.Fatalf("%d calls journaled, want 1", len(journal))
	}

	resume := func(req model.Request) model.Result {
		t.Helper()
		again := steps.NewContext(steps.ContextConfig{RunID: "refund-1", Step: 3, Attempt: 2, Journal: []checkpoint.CallRecord{journal[0]}})
		res, err := model.Call(ctx, again, "decide", m, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res = resume(ask(`{"type":"object"}`))
	if m.calls != 1 || !res.Replayed || len(res.Changed) != 0 || res.Model != "model-a-2026" || res.ToolCalls[0].ID != "t1" {
		t.Fatalf("resumed: %d model calls, %+v; want the recording, nothing changed", m.calls, res)
	}
	changed := ask(`{"type":"object","properties":{"id":{"type":"string"}}}`)
	changed.Model = "model-b"
	res = resume(changed)
	if m.calls != 1 || !res.Replayed || !slices.Equal(res.Changed, []string{"model", "tools"}) {
		t.Fatalf("resumed after a deploy: %d model calls, changed %v; want the recording and [model tools]", m.calls, res.Changed)
	}

	// Another conversation under the same name is a journal mismatch.
	other := ask(`{"type":"object"}`)
	other.Messages[0].Text = "refund order 43"
	again := steps.NewContext(steps.ContextConfig{RunID: "refund-1", Step: 3, Attempt: 2, Journal: []checkpoint.CallRecord{journal[0]}})
	if _, err := model.Call(ctx, again, "decide", m, other); !errors.Is(err, steps.ErrJournalMismatch) {
		t.Fatalf("another conversation under the recorded name: %v, want ErrJournalMismatch", err)
	}
	if m.calls != 1 {
		t.Fatalf("the model was called %d times, want 1", m.calls)
	}
}
