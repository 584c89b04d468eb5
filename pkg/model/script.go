package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/durable-run/durable/pkg/steps"
)

// Script is a model that answers from a recorded transcript, for tests and
// offline demos. Turn i of a conversation (the request holds i assistant
// messages) gets Turns[i]. It keeps no state of its own, so every worker,
// and a worker after a restart, answers a conversation alike.
type Script struct {
	// Model names the scripted model in responses that don't.
	Model string `json:"model"`
	Turns []Turn `json:"turns"`
}

// Turn is one recorded answer.
type Turn struct {
	// Expect, when set, must occur in the request's last message (its text
	// or a tool result's content): a conversation that went elsewhere than
	// the recording gets an error instead of an answer that doesn't fit.
	Expect   string   `json:"expect,omitempty"`
	Response Response `json:"response"`
	// Otherwise answers when Expect is not met (the branch the recording
	// did not take: a refund that was rejected). Without it, an unmet
	// Expect is an error.
	Otherwise *Response `json:"otherwise,omitempty"`
}

// LoadScript decodes a transcript (JSON: {"model": ..., "turns": [{"expect":
// ..., "response": {...}}]}), refusing unknown fields and empty scripts.
func LoadScript(data []byte) (*Script, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("model script: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("model script: data after the transcript object")
	}
	if len(s.Turns) == 0 {
		return nil, fmt.Errorf("model script: no turns")
	}
	for i, t := range s.Turns {
		if len(t.Response.ToolCalls) == 0 && t.Response.Text == "" {
			return nil, fmt.Errorf("model script: turn %d answers neither text nor tool calls", i)
		}
		if o := t.Otherwise; o != nil && len(o.ToolCalls) == 0 && o.Text == "" {
			return nil, fmt.Errorf("model script: turn %d's otherwise answers neither text nor tool calls", i)
		}
	}
	return &s, nil
}

// Complete answers the request's turn from the transcript.
func (s *Script) Complete(_ context.Context, req Request) (Response, error) {
	turn := 0
	for _, m := range req.Messages {
		if m.Role == RoleAssistant {
			turn++
		}
	}
	if turn >= len(s.Turns) {
		return Response{}, steps.Permanent(fmt.Errorf("scripted model: the transcript has %d turns, the conversation asks for turn %d", len(s.Turns), turn+1))
	}
	t := s.Turns[turn]
	resp := t.Response
	if t.Expect != "" && !lastMessageHas(req.Messages, t.Expect) {
		if t.Otherwise == nil {
			return Response{}, steps.Permanent(fmt.Errorf("scripted model: turn %d expects %q in the last message; the conversation went elsewhere than the transcript", turn+1, t.Expect))
		}
		resp = *t.Otherwise
	}
	if resp.Model == "" {
		resp.Model = s.Model
	}
	if resp.StopReason == "" {
		resp.StopReason = StopEndTurn
		if len(resp.ToolCalls) > 0 {
			resp.StopReason = StopToolUse
		}
	}
	return resp, nil
}

func lastMessageHas(msgs []Message, s string) bool {
	if len(msgs) == 0 {
		return false
	}
	m := msgs[len(msgs)-1]
	if strings.Contains(m.Text, s) {
		return true
	}
	for _, r := range m.ToolResults {
		if strings.Contains(r.Content, s) {
			return true
		}
	}
	return false
}
