package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/providertest"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/model/openai"
	"github.com/durable-run/durable/pkg/steps"
)

const key = "sk-test-key"

var lookupOrder = model.ToolDef{
	Name:        "lookup_order",
	Description: "Look up an order by id.",
	Schema:      json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"],"additionalProperties":false}`),
}

func newClient(t *testing.T, url string, retries *[]time.Duration) *openai.Client {
	t.Helper()
	var mu sync.Mutex
	c, err := openai.New(openai.Options{
		APIKey: key, Model: "gpt-4.1", BaseURL: url, MaxTokens: 1024,
		Retry: model.Retry{MaxAttempts: 3, BaseDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond,
			OnRetry: func(_ int, _ *model.Error, wait time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if retries != nil {
					*retries = append(*retries, wait)
				}
			}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ask() model.Request {
	return model.Request{
		System:   "You are a support agent.",
		Messages: []model.Message{{Role: model.RoleUser, Text: "Where is order 42?"}},
	}
}

func assertHeaders(t *testing.T, r providertest.Request) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != "/chat/completions" {
		t.Errorf("got %s %s, want POST /chat/completions", r.Method, r.Path)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+key {
		t.Errorf("Authorization %q, want Bearer <key>", got)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content-type %q", ct)
	}
}

func TestText(t *testing.T) {
	srv := providertest.Start(t, providertest.Reply{Status: 200, File: "text_response.json"})
	resp, err := newClient(t, srv.URL, nil).Complete(context.Background(), ask())
	if err != nil {
		t.Fatal(err)
	}
	want := model.Response{Model: "gpt-4.1-2025-04-14", Text: "Order 42 shipped yesterday.",
		StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 25, OutputTokens: 9}}
	if resp.Model != want.Model || resp.Text != want.Text || resp.StopReason != want.StopReason || resp.Usage != want.Usage || resp.ToolCalls != nil {
		t.Errorf("got %+v, want %+v", resp, want)
	}
	reqs := srv.Requests()
	assertHeaders(t, reqs[0])
	providertest.AssertBody(t, "text_request.json", reqs[0].Body)
}

func TestToolCall(t *testing.T) {
	srv := providertest.Start(t, providertest.Reply{Status: 200, File: "tool_response.json"})
	req := ask()
	req.Tools = []model.ToolDef{lookupOrder}
	// A second turn: an earlier tool call and its result go back as history.
	req.Messages = append(req.Messages,
		model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "toolu_prev", Name: "lookup_order", Args: json.RawMessage(`{"order_id":"41"}`)}}},
		model.Message{Role: model.RoleUser, ToolResults: []model.ToolResult{{CallID: "toolu_prev", Content: "not found", IsError: true}}, Text: "Sorry, I meant 42."},
	)
	resp, err := newClient(t, srv.URL, nil).Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != model.StopToolUse || resp.Text != "" || len(resp.ToolCalls) != 1 {
		t.Fatalf("got %+v", resp)
	}
	tc := resp.ToolCalls[0]
	if tc.ID != "call_abc123" || tc.Name != "lookup_order" || string(tc.Args) != `{"order_id": "42"}` && string(tc.Args) != `{"order_id":"42"}` {
		t.Errorf("tool call %+v args %s", tc, tc.Args)
	}
	if resp.Usage != (model.Usage{InputTokens: 412, OutputTokens: 57}) {
		t.Errorf("usage %+v", resp.Usage)
	}
	providertest.AssertBody(t, "tool_request.json", srv.Requests()[0].Body)
}

func TestRetryAfter429(t *testing.T) {
	srv := providertest.Start(t,
		providertest.Reply{Status: 429, File: "rate_limit_error.json", Header: map[string]string{"Retry-After": "0.1"}},
		providertest.Reply{Status: 200, File: "text_response.json"},
	)
	var waits []time.Duration
	start := time.Now()
	resp, err := newClient(t, srv.URL, &waits).Complete(context.Background(), ask())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text == "" || len(srv.Requests()) != 2 {
		t.Fatalf("got %+v after %d requests", resp, len(srv.Requests()))
	}
	// The server's Retry-After (100ms) beats the 20ms backoff.
	if len(waits) != 1 || waits[0] != 100*time.Millisecond {
		t.Errorf("waits %v, want [100ms]", waits)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("retried after %v, before the 100ms Retry-After", el)
	}
}

func TestGiveUpAfter500s(t *testing.T) {
	r500 := providertest.Reply{Status: 500, File: "server_error.json"}
	srv := providertest.Start(t, r500, r500, r500)
	var waits []time.Duration
	_, err := newClient(t, srv.URL, &waits).Complete(context.Background(), ask())
	var me *model.Error
	if !errors.As(err, &me) {
		t.Fatalf("got %v, want *model.Error", err)
	}
	if !me.Retryable || me.StatusCode != 500 || me.Attempts != 3 || steps.IsPermanent(err) {
		t.Errorf("got %+v (permanent %v)", me, steps.IsPermanent(err))
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
	// Backoff doubles: 20ms then 40ms, less up to a quarter of jitter.
	if len(waits) != 2 || waits[0] < 15*time.Millisecond || waits[0] > 20*time.Millisecond || waits[1] < 30*time.Millisecond || waits[1] > 40*time.Millisecond {
		t.Errorf("waits %v, want ~[20ms 40ms]", waits)
	}
}

func TestBadRequestIsPermanent(t *testing.T) {
	srv := providertest.Start(t, providertest.Reply{Status: 400, File: "invalid_request_error.json"})
	_, err := newClient(t, srv.URL, nil).Complete(context.Background(), ask())
	var me *model.Error
	if !errors.As(err, &me) || me.Retryable || me.StatusCode != 400 || me.Attempts != 1 {
		t.Fatalf("got %v", err)
	}
	if !steps.IsPermanent(err) {
		t.Error("a 400 is not marked permanent")
	}
	if !strings.Contains(err.Error(), "must be a response to a preceeding message") {
		t.Errorf("error does not carry the provider's message: %v", err)
	}
}

func TestConnectionErrorRetried(t *testing.T) {
	c := newClient(t, "http://127.0.0.1:1", nil) // nothing listens on port 1
	_, err := c.Complete(context.Background(), ask())
	var me *model.Error
	if !errors.As(err, &me) || !me.Retryable || me.StatusCode != 0 || me.Attempts != 3 {
		t.Fatalf("got %v", err)
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_MODEL", "")
	_, err := openai.FromEnv()
	if err == nil || !strings.Contains(err.Error(), "OPENAI_API_KEY") || !strings.Contains(err.Error(), "OPENAI_MODEL") {
		t.Fatalf("got %v, want an error naming both variables", err)
	}
	srv := providertest.Start(t, providertest.Reply{Status: 200, File: "text_response.json"})
	t.Setenv("OPENAI_API_KEY", key)
	t.Setenv("OPENAI_MODEL", "gpt-4.1")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	c, err := openai.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(context.Background(), ask()); err != nil {
		t.Fatal(err)
	}
	assertHeaders(t, srv.Requests()[0])
}
