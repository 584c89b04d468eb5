package model

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// PromptHash is the sha256 (hex) of a canonical JSON encoding of what the
// model is asked: the system prompt and the messages. The model, the tools
// and MaxTokens are left out: the journal records the model name and
// [ToolsHash] on their own, so a resume can say which of them changed.
//
// Canonical means JSON values inside (tool-call arguments) are re-encoded
// with sorted keys and no insignificant whitespace, so two encodings of the
// same arguments hash alike.
func PromptHash(req Request) (string, error) {
	msgs := make([]Message, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = m
		if len(m.ToolCalls) > 0 {
			msgs[i].ToolCalls = make([]ToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				args, err := canonical(c.Args)
				if err != nil {
					return "", fmt.Errorf("prompt hash: message %d tool call %q: %w", i, c.Name, err)
				}
				c.Args = args
				msgs[i].ToolCalls[j] = c
			}
		}
	}
	return hashJSON(struct {
		System   string    `json:"system"`
		Messages []Message `json:"messages"`
	}{req.System, msgs})
}

// ToolsHash is the sha256 (hex) of a canonical JSON encoding of the tool
// definitions, in the order given (the order is part of what the model sees).
func ToolsHash(tools []ToolDef) (string, error) {
	out := make([]ToolDef, len(tools))
	for i, t := range tools {
		schema, err := canonical(t.Schema)
		if err != nil {
			return "", fmt.Errorf("tools hash: tool %q schema: %w", t.Name, err)
		}
		t.Schema = schema
		out[i] = t
	}
	return hashJSON(out)
}

func hashJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// canonical re-encodes a JSON value with sorted object keys and numbers as
// written (json.Number), so formatting does not change the hash.
func canonical(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("invalid JSON: trailing data")
	}
	return json.Marshal(v)
}
