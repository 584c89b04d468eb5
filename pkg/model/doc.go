// Package model is the provider-neutral face of a language model: messages and
// tool definitions in; text, tool calls and token usage out.
//
// A step calls a [Model] through its journal so a resumed step reads the
// recorded [Response] instead of asking again: a model is not deterministic.
// [PromptHash] and [ToolsHash] let a resume notice that the prompt or the tool
// schema changed since the call was recorded.
//
// Adapters live in subpackages (model/anthropic, model/openai), built on each
// provider's official SDK and configured from env:
//
//	m, err := anthropic.FromEnv() // ANTHROPIC_API_KEY, ANTHROPIC_MODEL, ANTHROPIC_BASE_URL
//	if err != nil {
//		return err
//	}
//	resp, err := m.Complete(ctx, model.Request{
//		System:   "You are a support agent.",
//		Messages: []model.Message{{Role: model.RoleUser, Text: "Where is order 42?"}},
//		Tools:    []model.ToolDef{{Name: "lookup_order", Schema: schema}},
//	})
//
// Errors: an adapter retries 429, 5xx and connection failures itself, with
// exponential backoff ([Retry]). What it returns is an [*Error]; one that
// retrying cannot fix (a 4xx other than 408/409/429) is also wrapped with
// steps.Permanent, so the worker dead-letters the run instead of retrying.
package model
