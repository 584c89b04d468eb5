package model_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/model"
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
