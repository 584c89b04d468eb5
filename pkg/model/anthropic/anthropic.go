// Package anthropic is a [model.Model] on Anthropic's Messages API, built on
// the official SDK (github.com/anthropics/anthropic-sdk-go).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/durable-run/durable/pkg/model"
)

const provider = "anthropic"

// Options configures a Client: BaseURL defaults to
// https://api.anthropic.com/, MaxTokens to 4096 (the API requires one).
type Options = model.Config

// Client is a model.Model for Anthropic.
type Client struct {
	sdk  sdk.Client
	opts Options
}

var _ model.Model = (*Client)(nil)

// FromEnv builds a Client from ANTHROPIC_API_KEY, ANTHROPIC_MODEL and
// ANTHROPIC_BASE_URL (optional).
func FromEnv() (*Client, error) { return New(model.ConfigFromEnv("ANTHROPIC")) }

// New builds a Client. Nothing else in the environment is read.
func New(o Options) (*Client, error) {
	if err := o.Check(provider, "ANTHROPIC", "claude-sonnet-4-5"); err != nil {
		return nil, err
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 4096
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(o.APIKey),
		option.WithHTTPClient(o.HTTPClient),
		option.WithMaxRetries(0), // model.Retry retries, with its own backoff
	}
	if o.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(o.BaseURL))
	}
	return &Client{sdk: sdk.NewClient(opts...), opts: o}, nil
}

// Complete sends one Messages API request, retrying per Options.Retry.
func (c *Client) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	params, err := c.params(req)
	if err != nil {
		return model.Response{}, err
	}
	var msg *sdk.Message
	err = c.opts.Retry.Do(ctx, func(ctx context.Context) error {
		var err error
		msg, err = c.sdk.Messages.New(ctx, params)
		return classify(ctx, err)
	})
	if err != nil {
		return model.Response{}, err
	}
	return response(msg), nil
}

func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("anthropic: %w", ctx.Err())
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		return model.Classify(provider, apiErr.StatusCode, h, err)
	}
	return model.Classify(provider, 0, nil, err)
}

func (c *Client) params(req model.Request) (sdk.MessageNewParams, error) {
	p := sdk.MessageNewParams{
		Model:     sdk.Model(c.opts.Model),
		MaxTokens: int64(c.opts.MaxTokens),
	}
	if req.Model != "" {
		p.Model = sdk.Model(req.Model)
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = int64(req.MaxTokens)
	}
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	for i, m := range req.Messages {
		var blocks []sdk.ContentBlockParamUnion
		for _, r := range m.ToolResults {
			blocks = append(blocks, sdk.NewToolResultBlock(r.CallID, r.Content, r.IsError))
		}
		if m.Text != "" {
			blocks = append(blocks, sdk.NewTextBlock(m.Text))
		}
		for _, tc := range m.ToolCalls {
			args := tc.Args
			if len(args) == 0 {
				args = json.RawMessage("{}")
			}
			blocks = append(blocks, sdk.NewToolUseBlock(tc.ID, args, tc.Name))
		}
		switch m.Role {
		case model.RoleUser:
			p.Messages = append(p.Messages, sdk.NewUserMessage(blocks...))
		case model.RoleAssistant:
			p.Messages = append(p.Messages, sdk.NewAssistantMessage(blocks...))
		default:
			return p, fmt.Errorf("anthropic: message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		schema, err := inputSchema(t.Schema)
		if err != nil {
			return p, fmt.Errorf("anthropic: tool %q: %w", t.Name, err)
		}
		tp := &sdk.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		p.Tools = append(p.Tools, sdk.ToolUnionParam{OfTool: tp})
	}
	return p, nil
}

// inputSchema splits a JSON Schema object into the SDK's typed fields and
// passes the rest (additionalProperties, $defs...) through as extras.
func inputSchema(raw json.RawMessage) (sdk.ToolInputSchemaParam, error) {
	var s sdk.ToolInputSchemaParam
	if len(raw) == 0 {
		return s, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return s, fmt.Errorf("schema is not a JSON object: %w", err)
	}
	if t, ok := m["type"]; ok && t != "object" {
		return s, fmt.Errorf("schema type is %v, want object", t)
	}
	delete(m, "type")
	s.Properties = m["properties"]
	delete(m, "properties")
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if name, ok := r.(string); ok {
				s.Required = append(s.Required, name)
			}
		}
		delete(m, "required")
	}
	if len(m) > 0 {
		s.ExtraFields = m
	}
	return s, nil
}

func response(msg *sdk.Message) model.Response {
	r := model.Response{
		Model: string(msg.Model),
		Usage: model.Usage{InputTokens: msg.Usage.InputTokens, OutputTokens: msg.Usage.OutputTokens},
	}
	var text []string
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			r.ToolCalls = append(r.ToolCalls, model.ToolCall{ID: b.ID, Name: b.Name, Args: append(json.RawMessage(nil), b.Input...)})
		}
	}
	r.Text = strings.Join(text, "")
	switch msg.StopReason {
	case "end_turn", "stop_sequence":
		r.StopReason = model.StopEndTurn
	case "tool_use":
		r.StopReason = model.StopToolUse
	case "max_tokens":
		r.StopReason = model.StopMaxTokens
	default:
		r.StopReason = model.StopReason(msg.StopReason)
	}
	return r
}
