package model_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// A provider's 429 slows a fleet-wide limit down for as long as it
// asked (flow.RetryAfter), through any wrapping; other answers do not.
func TestErrorIsRateLimited(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "2")
	limited := fmt.Errorf("step assess: %w", model.Classify("anthropic", http.StatusTooManyRequests, h, errors.New("rate limited")))
	if d, ok := flow.RetryAfter(limited); !ok || d != 2*time.Second {
		t.Fatalf("a 429 with Retry-After 2: flow.RetryAfter = %s, %t", d, ok)
	}
	for _, status := range []int{0, http.StatusServiceUnavailable, http.StatusBadRequest} {
		if d, ok := flow.RetryAfter(model.Classify("openai", status, h, errors.New("no"))); ok {
			t.Errorf("HTTP %d counted as rate limited (%s)", status, d)
		}
	}
}

// limits is a steps.RateLimits that always has a token and slows down
// for what flow.RetryAfter reads.
type limits struct{ slowed int }

func (l *limits) Take(context.Context, string) (time.Duration, error) { return 0, nil }
func (l *limits) SlowDownOn(_ context.Context, _ string, err error) time.Duration {
	d, ok := flow.RetryAfter(err)
	if ok {
		l.slowed++
	}
	return d
}

// A model call of a rate-limited resource that gets a 429 is not retried
// by the adapter's Retry: the step is handed back for the Retry-After,
// after the fleet's limit slowed down. Without the resource, Retry
// retries as before.
func TestLimitedCallLeavesA429ToTheFleet(t *testing.T) {
	h := http.Header{}
	h.Set("Retry-After", "2")
	requests := 0
	m := modelFunc(func(ctx context.Context, _ model.Request) (model.Response, error) {
		var resp model.Response
		err := model.Retry{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}.Do(ctx, func(context.Context) error {
			requests++
			return model.Classify("fake", http.StatusTooManyRequests, h, errors.New("slow down"))
		})
		return resp, err
	})
	lim := &limits{}
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 1, Attempt: 1, RateLimits: lim})
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Text: "hi"}}}
	_, err := model.Call(context.Background(), s, "ask", m, req, steps.Resource("fake"))
	var te *steps.ThrottledError
	if !errors.As(err, &te) || te.Wait != 2*time.Second || requests != 1 || lim.slowed != 1 {
		t.Fatalf("429 of a limited call: err %v, %d requests, %d slow-downs; want a ThrottledError for 2s after 1 request", err, requests, lim.slowed)
	}
	requests = 0
	if _, err := model.Call(context.Background(), s, "plain", m, req); errors.As(err, &te) || requests != 3 {
		t.Fatalf("429 of a call with no resource: err %v after %d requests, want 3 and no ThrottledError", err, requests)
	}
}

type modelFunc func(context.Context, model.Request) (model.Response, error)

func (f modelFunc) Complete(ctx context.Context, r model.Request) (model.Response, error) {
	return f(ctx, r)
}
