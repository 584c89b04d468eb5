package model_test

import (
	"encoding/json"
	"testing"

	"github.com/durable-run/durable/pkg/model"
)

func mustHash(t *testing.T, f func() (string, error)) string {
	t.Helper()
	h, err := f()
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 64 {
		t.Fatalf("hash %q is not a hex sha256", h)
	}
	return h
}

// The hashes a journal records must not move with JSON formatting or key
// order, and must move with anything the model sees.
func TestHashesAreCanonical(t *testing.T) {
	tools := func(schema string) []model.ToolDef {
		return []model.ToolDef{{Name: "lookup_order", Description: "find an order", Schema: json.RawMessage(schema)}}
	}
	a := mustHash(t, func() (string, error) {
		return model.ToolsHash(tools(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`))
	})
	b := mustHash(t, func() (string, error) {
		return model.ToolsHash(tools(`{ "required": ["id"], "properties": { "id": {"type": "string"} }, "type": "object" }`))
	})
	if a != b {
		t.Errorf("key order and spacing changed the tools hash: %s vs %s", a, b)
	}
	c := mustHash(t, func() (string, error) {
		return model.ToolsHash(tools(`{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}`))
	})
	if a == c {
		t.Error("a changed schema kept the tools hash")
	}
	if _, err := model.ToolsHash(tools(`{"type":`)); err == nil {
		t.Error("an invalid schema was hashed")
	}

	req := func(args string) model.Request {
		return model.Request{System: "you are a refund agent", Messages: []model.Message{
			{Role: model.RoleUser, Text: "refund order 42"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "t1", Name: "lookup_order", Args: json.RawMessage(args)}}},
		}}
	}
	p1 := mustHash(t, func() (string, error) { return model.PromptHash(req(`{"id":"42","amount":10.50}`)) })
	p2 := mustHash(t, func() (string, error) { return model.PromptHash(req(`{"amount":10.50, "id":"42"}`)) })
	if p1 != p2 {
		t.Errorf("argument key order changed the prompt hash")
	}
	p3 := mustHash(t, func() (string, error) { return model.PromptHash(req(`{"id":"43","amount":10.50}`)) })
	if p1 == p3 {
		t.Error("other arguments kept the prompt hash")
	}
	other := req(`{"id":"42","amount":10.50}`)
	other.System = "you are a billing agent"
	if p4 := mustHash(t, func() (string, error) { return model.PromptHash(other) }); p4 == p1 {
		t.Error("another system prompt kept the prompt hash")
	}
}
