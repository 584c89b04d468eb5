package model

import (
	"context"
	"encoding/json"
)

// Model completes one turn of a conversation. Implementations retry transient
// provider failures themselves; see [Retry] and [Error].
type Model interface {
	Complete(ctx context.Context, req Request) (Response, error)
}

// Role says who wrote a message.
type Role string

const (
	// RoleUser carries the user's text and the results of tool calls.
	RoleUser Role = "user"
	// RoleAssistant carries what the model said and the tools it called.
	RoleAssistant Role = "assistant"
)

// Message is one entry in the conversation. A user message holds Text and/or
// ToolResults; an assistant message holds Text and/or ToolCalls.
type Message struct {
	Role        Role         `json:"role"`
	Text        string       `json:"text,omitempty"`
	ToolCalls   []ToolCall   `json:"tool_calls,omitempty"`
	ToolResults []ToolResult `json:"tool_results,omitempty"`
}

// ToolCall is the model asking for a tool to run.
type ToolCall struct {
	// ID is the provider's id for the call; its result must quote it.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Args is the JSON object of arguments, as the model wrote it.
	Args json.RawMessage `json:"args"`
}

// ToolResult answers a ToolCall.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Content string `json:"content"`
	// IsError tells the model the tool failed; Content says how.
	IsError bool `json:"is_error,omitempty"`
}

// ToolDef describes a tool the model may call.
type ToolDef struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Schema is the JSON Schema of the arguments: an object schema
	// ({"type":"object","properties":...}). Empty means no arguments.
	Schema json.RawMessage `json:"schema,omitempty"`
}

// Request is one call to a model.
type Request struct {
	// Model overrides the adapter's configured model; empty uses it.
	Model    string    `json:"model,omitempty"`
	System   string    `json:"system,omitempty"`
	Messages []Message `json:"messages"`
	Tools    []ToolDef `json:"tools,omitempty"`
	// MaxTokens caps the answer; 0 uses the adapter's default.
	MaxTokens int `json:"max_tokens,omitempty"`
}

// StopReason says why the model stopped. Values other than the constants
// below are the provider's own, passed through.
type StopReason string

const (
	StopEndTurn   StopReason = "end_turn"   // the model finished its answer
	StopToolUse   StopReason = "tool_use"   // the model wants ToolCalls run
	StopMaxTokens StopReason = "max_tokens" // the answer hit MaxTokens
)

// Response is what the model answered.
type Response struct {
	// Model is the model that answered, as the provider names it (it may be
	// more precise than the one asked for, e.g. a dated snapshot).
	Model      string     `json:"model"`
	Text       string     `json:"text,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	StopReason StopReason `json:"stop_reason"`
	Usage      Usage      `json:"usage"`
}

// Usage counts the tokens one call cost.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}
