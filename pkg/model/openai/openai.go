// Package openai is a [model.Model] on OpenAI's Chat Completions API, built
// on the official SDK (github.com/openai/openai-go).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/durable-run/durable/pkg/model"
)

const provider = "openai"

// Options configures a Client: BaseURL defaults to
// https://api.openai.com/v1/, MaxTokens to 0 (the model's limit).
type Options = model.Config

// Client is a model.Model for OpenAI.
type Client struct {
	sdk  sdk.Client
	opts Options
}

var _ model.Model = (*Client)(nil)

// FromEnv builds a Client from OPENAI_API_KEY, OPENAI_MODEL and
// OPENAI_BASE_URL (optional).
func FromEnv() (*Client, error) { return New(model.ConfigFromEnv("OPENAI")) }

// New builds a Client. The SDK still reads OPENAI_ORG_ID and
// OPENAI_PROJECT_ID from the environment; what Options sets wins.
func New(o Options) (*Client, error) {
	if err := o.Check(provider, "OPENAI", "gpt-4.1"); err != nil {
		return nil, err
	}
	opts := []option.RequestOption{
		option.WithAPIKey(o.APIKey),
		option.WithHTTPClient(o.HTTPClient),
		option.WithMaxRetries(0), // model.Retry retries, with its own backoff
	}
	if o.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(o.BaseURL))
	} else {
		opts = append(opts, option.WithBaseURL("https://api.openai.com/v1/"))
	}
	return &Client{sdk: sdk.NewClient(opts...), opts: o}, nil
}

// Complete sends one Chat Completions request, retrying per Options.Retry.
func (c *Client) Complete(ctx context.Context, req model.Request) (model.Response, error) {
	params, err := c.params(req)
	if err != nil {
		return model.Response{}, err
	}
	var cc *sdk.ChatCompletion
	err = c.opts.Retry.Do(ctx, func(ctx context.Context) error {
		var err error
		cc, err = c.sdk.Chat.Completions.New(ctx, params)
		return classify(ctx, err)
	})
	if err != nil {
		return model.Response{}, err
	}
	if len(cc.Choices) == 0 {
		return model.Response{}, fmt.Errorf("openai: response %s has no choices", cc.ID)
	}
	return response(cc), nil
}

func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("openai: %w", ctx.Err())
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		if apiErr.Message != "" { // the SDK's Error() leaves it out
			err = fmt.Errorf("%w: %s", err, apiErr.Message)
		}
		return model.Classify(provider, apiErr.StatusCode, h, err)
	}
	return model.Classify(provider, 0, nil, err)
}

func (c *Client) params(req model.Request) (sdk.ChatCompletionNewParams, error) {
	p := sdk.ChatCompletionNewParams{Model: shared.ChatModel(c.opts.Model)}
	if req.Model != "" {
		p.Model = shared.ChatModel(req.Model)
	}
	n := c.opts.MaxTokens
	if req.MaxTokens > 0 {
		n = req.MaxTokens
	}
	if n > 0 {
		p.MaxCompletionTokens = sdk.Int(int64(n))
	}
	if req.System != "" {
		p.Messages = append(p.Messages, sdk.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case model.RoleUser:
			// Tool results must follow the assistant message that called.
			for _, r := range m.ToolResults {
				content := r.Content
				if r.IsError {
					content = "error: " + content
				}
				p.Messages = append(p.Messages, sdk.ToolMessage(content, r.CallID))
			}
			if m.Text != "" {
				p.Messages = append(p.Messages, sdk.UserMessage(m.Text))
			}
		case model.RoleAssistant:
			a := &sdk.ChatCompletionAssistantMessageParam{}
			if m.Text != "" {
				a.Content.OfString = sdk.String(m.Text)
			}
			for _, tc := range m.ToolCalls {
				args := string(tc.Args)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID:       tc.ID,
						Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: args},
					},
				})
			}
			p.Messages = append(p.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: a})
		default:
			return p, fmt.Errorf("openai: message %d: unknown role %q", i, m.Role)
		}
	}
	for _, t := range req.Tools {
		fn := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		if len(t.Schema) > 0 {
			if err := json.Unmarshal(t.Schema, &fn.Parameters); err != nil {
				return p, fmt.Errorf("openai: tool %q: schema is not a JSON object: %w", t.Name, err)
			}
		}
		p.Tools = append(p.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	return p, nil
}

func response(cc *sdk.ChatCompletion) model.Response {
	ch := cc.Choices[0]
	r := model.Response{
		Model: cc.Model,
		Text:  ch.Message.Content,
		Usage: model.Usage{InputTokens: cc.Usage.PromptTokens, OutputTokens: cc.Usage.CompletionTokens},
	}
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type == "function" {
			r.ToolCalls = append(r.ToolCalls, model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Args: json.RawMessage(tc.Function.Arguments)})
		}
	}
	switch ch.FinishReason {
	case "stop":
		r.StopReason = model.StopEndTurn
	case "tool_calls":
		r.StopReason = model.StopToolUse
	case "length":
		r.StopReason = model.StopMaxTokens
	default:
		r.StopReason = model.StopReason(ch.FinishReason)
	}
	return r
}
