package model_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// conversation is a request that has had turns assistant answers, ending
// with a user message saying last (as text, or as a tool result).
func conversation(turns int, last string, asToolResult bool) model.Request {
	var msgs []model.Message
	msgs = append(msgs, model.Message{Role: model.RoleUser, Text: "refund order A-1"})
	for i := 0; i < turns; i++ {
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Text: "thinking"})
		msgs = append(msgs, model.Message{Role: model.RoleUser, Text: "go on"})
	}
	m := &msgs[len(msgs)-1]
	if asToolResult {
		m.Text = ""
		m.ToolResults = []model.ToolResult{{CallID: "c", Content: "other"}, {CallID: "d", Content: last}}
	} else {
		m.Text = last
	}
	return model.Request{Messages: msgs}
}

func TestScriptPicksTheTurnByAssistantMessages(t *testing.T) {
	s := &model.Script{Model: "scripted-1", Turns: []model.Turn{
		{Response: model.Response{Text: "first"}},
		{Response: model.Response{Text: "second"}},
		{Response: model.Response{Text: "third", Model: "own-model"}},
	}}
	for turn, want := range []string{"first", "second", "third"} {
		resp, err := s.Complete(context.Background(), conversation(turn, "anything", false))
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if resp.Text != want {
			t.Errorf("turn %d answered %q, want %q", turn, resp.Text, want)
		}
	}
	// User messages don't count, however many there are.
	req := conversation(1, "x", false)
	req.Messages = append(req.Messages, model.Message{Role: model.RoleUser, Text: "more"}, model.Message{Role: model.RoleUser, Text: "and more"})
	if resp, err := s.Complete(context.Background(), req); err != nil || resp.Text != "second" {
		t.Errorf("1 assistant message among 4 user ones: %q, %v; want second", resp.Text, err)
	}
}

func TestScriptFillsModelAndStopReason(t *testing.T) {
	call := model.ToolCall{ID: "t1", Name: "lookup_order", Args: json.RawMessage(`{"id":"A-1"}`)}
	s := &model.Script{Model: "scripted-1", Turns: []model.Turn{
		{Response: model.Response{ToolCalls: []model.ToolCall{call}}},
		{Response: model.Response{Text: "done"}},
		{Response: model.Response{Text: "cut", Model: "dated-2025", StopReason: model.StopMaxTokens}},
	}}
	cases := []struct {
		turn  int
		model string
		stop  model.StopReason
	}{
		{0, "scripted-1", model.StopToolUse},
		{1, "scripted-1", model.StopEndTurn},
		{2, "dated-2025", model.StopMaxTokens}, // set in the transcript: kept
	}
	for _, tc := range cases {
		resp, err := s.Complete(context.Background(), conversation(tc.turn, "x", false))
		if err != nil {
			t.Fatalf("turn %d: %v", tc.turn, err)
		}
		if resp.Model != tc.model || resp.StopReason != tc.stop {
			t.Errorf("turn %d: model %q stop %q, want %q %q", tc.turn, resp.Model, resp.StopReason, tc.model, tc.stop)
		}
	}
	// Filling in defaults must not write into the script: a second
	// conversation at the same turn gets the transcript as recorded.
	if s.Turns[0].Response.Model != "" || s.Turns[0].Response.StopReason != "" {
		t.Errorf("Complete changed the script: %+v", s.Turns[0].Response)
	}
}

func TestScriptExpect(t *testing.T) {
	otherwise := &model.Response{Text: "refund rejected"}
	s := &model.Script{Model: "scripted-1", Turns: []model.Turn{
		{Expect: "pay_", Response: model.Response{Text: "refunded"}, Otherwise: otherwise},
		{Expect: `"status":"delivered"`, Response: model.Response{Text: "delivered"}},
	}}
	cases := []struct {
		name    string
		req     model.Request
		want    string
		permErr bool
	}{
		{"met in the text", conversation(0, "paid as pay_123", false), "refunded", false},
		{"met in a tool result", conversation(0, `{"id":"pay_9"}`, true), "refunded", false},
		{"unmet, otherwise", conversation(0, "not run: rejected", false), "refund rejected", false},
		{"met only in an earlier message", func() model.Request {
			r := conversation(0, "nothing", false)
			r.Messages = append([]model.Message{{Role: model.RoleUser, Text: "pay_1"}}, r.Messages...)
			return r
		}(), "refund rejected", false},
		{"met, no otherwise", conversation(1, `{"status":"delivered"}`, true), "delivered", false},
		{"unmet, no otherwise", conversation(1, `{"status":"lost"}`, true), "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.Complete(context.Background(), tc.req)
			if tc.permErr {
				if err == nil || !steps.IsPermanent(err) {
					t.Fatalf("got %+v, %v; want a permanent error", resp, err)
				}
				if !strings.Contains(err.Error(), "delivered") {
					t.Errorf("error %q does not say what the turn expected", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Text != tc.want {
				t.Errorf("answered %q, want %q", resp.Text, tc.want)
			}
			if resp.Model != "scripted-1" || resp.StopReason != model.StopEndTurn {
				t.Errorf("defaults not filled: model %q stop %q", resp.Model, resp.StopReason)
			}
		})
	}
	if otherwise.Model != "" {
		t.Errorf("Complete changed the script's Otherwise: %+v", otherwise)
	}
}

func TestScriptPastTheLastTurnIsPermanent(t *testing.T) {
	s := &model.Script{Turns: []model.Turn{{Response: model.Response{Text: "only"}}}}
	_, err := s.Complete(context.Background(), conversation(1, "x", false))
	if err == nil || !steps.IsPermanent(err) {
		t.Fatalf("turn 2 of a 1-turn script: %v, want a permanent error", err)
	}
	if !strings.Contains(err.Error(), "1 turns") || !strings.Contains(err.Error(), "turn 2") {
		t.Errorf("error %q should say how many turns there are and which was asked for", err)
	}
}

func TestLoadScript(t *testing.T) {
	good := `{"model": "m", "turns": [
		{"expect": "A-1", "response": {"text": "looking", "tool_calls": [{"id": "t1", "name": "lookup", "args": {"id": "A-1"}}]}},
		{"response": {"text": "done"}, "otherwise": {"text": "other"}}]}`
	s, err := model.LoadScript([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Model != "m" || len(s.Turns) != 2 || s.Turns[0].Expect != "A-1" || s.Turns[0].Response.ToolCalls[0].Name != "lookup" ||
		string(s.Turns[0].Response.ToolCalls[0].Args) != `{"id": "A-1"}` || s.Turns[1].Otherwise == nil || s.Turns[1].Otherwise.Text != "other" {
		t.Errorf("decoded %+v", s)
	}

	bad := []struct{ name, doc, says string }{
		{"unknown field", `{"turns": [{"response": {"text": "x"}, "expect_not": "y"}]}`, "expect_not"},
		{"unknown top-level field", `{"modle": "m", "turns": [{"response": {"text": "x"}}]}`, "modle"},
		{"no turns", `{"model": "m", "turns": []}`, "no turns"},
		{"turns missing", `{"model": "m"}`, "no turns"},
		{"empty turn", `{"turns": [{"response": {"text": "x"}}, {"expect": "y", "response": {}}]}`, "turn 1"},
		{"not JSON", `turns: []`, "model script"},
		{"data after the object", `{"turns": [{"response": {"text": "x"}}]} {"turns": []}`, "data after"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			s, err := model.LoadScript([]byte(tc.doc))
			if err == nil {
				t.Fatalf("loaded %+v, want an error", s)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("error %q should mention %q", err, tc.says)
			}
		})
	}
}

// The recorded refund-agent session parses and plays its happy path: a
// lookup, a refund, and the answer that quotes the payment.
func TestRefundAgentTranscriptLoads(t *testing.T) {
	data, err := os.ReadFile("../../internal/demo/examples/refundagent/testdata/transcript.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := model.LoadScript(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Turns) < 2 || s.Model == "" {
		t.Fatalf("transcript has %d turns, model %q", len(s.Turns), s.Model)
	}
	first := s.Turns[0]
	resp, err := s.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: first.Expect}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) == 0 || resp.StopReason != model.StopToolUse || resp.Model != s.Model {
		t.Errorf("first turn answered %+v, want a tool call by %s", resp, s.Model)
	}
	for i, c := range resp.ToolCalls {
		if !json.Valid(c.Args) {
			t.Errorf("call %d args %s are not JSON", i, c.Args)
		}
	}
}

func TestDescribe(t *testing.T) {
	cases := []struct {
		resp model.Response
		want string
	}{
		{model.Response{Model: "m", Usage: model.Usage{InputTokens: 1, OutputTokens: 2}, StopReason: model.StopToolUse,
			ToolCalls: []model.ToolCall{{Name: "a"}, {Name: "b"}}}, "m: 1 in + 2 out tokens, calls a, b"},
		{model.Response{Model: "m", Usage: model.Usage{InputTokens: 812, OutputTokens: 95}, Text: "hi", StopReason: model.StopEndTurn},
			"m: 812 in + 95 out tokens, answers"},
		{model.Response{Model: "m", Text: "hi"}, "m: 0 in + 0 out tokens, answers"},
		{model.Response{Model: "m", Text: "hi", StopReason: model.StopMaxTokens}, "m: 0 in + 0 out tokens, answers (max_tokens)"},
		{model.Response{Usage: model.Usage{InputTokens: 3, OutputTokens: 4}, Text: "hi"}, "3 in + 4 out tokens, answers"},
		{model.Response{Text: "hi", StopReason: "refusal"}, "0 in + 0 out tokens, answers (refusal)"},
	}
	for _, tc := range cases {
		if got := model.Describe(tc.resp); got != tc.want {
			t.Errorf("Describe(%+v) = %q, want %q", tc.resp, got, tc.want)
		}
	}
}

// The rule that a turn answers something holds for its Otherwise too: an
// empty Otherwise would end a run with an empty answer.
func TestLoadScriptRefusesAnEmptyOtherwise(t *testing.T) {
	s, err := model.LoadScript([]byte(`{"turns": [{"expect": "pay_", "response": {"text": "refunded"}, "otherwise": {}}]}`))
	if err == nil {
		t.Fatalf("loaded %+v, want an error for the empty otherwise", s)
	}
}
