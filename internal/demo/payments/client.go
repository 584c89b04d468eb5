package payments

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

var tracer = otel.Tracer("github.com/durable-run/durable/internal/demo/payments")

// Client calls the payments API. The zero HTTP uses http.DefaultClient.
type Client struct {
	// BaseURL is where the API is mounted, e.g.
	// http://127.0.0.1:8080/demo/payments (a trailing slash is optional).
	BaseURL string
	HTTP    *http.Client
}

// ListOption narrows List.
type ListOption func(url.Values)

// WithKey lists only the payment made with this idempotency key.
func WithKey(key string) ListOption { return func(q url.Values) { q.Set("key", key) } }

// WithRunID lists only payments for this run.
func WithRunID(runID string) ListOption { return func(q url.Values) { q.Set("run_id", runID) } }

// Pay pays once per key. replayed reports that the provider had already seen
// key with this body and answered the original payment. A key reused with a
// different body returns a *ConflictError (errors.Is(err, ErrConflict)); any
// other non-2xx returns a *StatusError.
func (c Client) Pay(ctx context.Context, key string, req PayRequest) (p Payment, replayed bool, err error) {
	// A client span in the caller's trace (a step's ctx carries the run's),
	// its context sent on as traceparent.
	ctx, span := tracer.Start(ctx, "payments.pay", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", http.MethodPost), attribute.String("payments.idempotency_key", key)))
	defer func() {
		span.SetAttributes(attribute.Bool("payments.replayed", replayed))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if key == "" {
		return Payment{}, false, errors.New("pay: idempotency key is required")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Payment{}, false, fmt.Errorf("pay %s: %w", key, err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.root(), bytes.NewReader(body))
	if err != nil {
		return Payment{}, false, fmt.Errorf("pay %s: %w", key, err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", key)
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hr.Header))
	resp, err := c.do(hr, &p)
	if err != nil {
		if ce, ok := errors.AsType[*ConflictError](err); ok && ce.Key == "" {
			ce.Key = key
		}
		return Payment{}, false, fmt.Errorf("pay %s: %w", key, err)
	}
	return p, resp.Header.Get("Idempotent-Replayed") == "true", nil
}

// List returns payments in creation order.
func (c Client) List(ctx context.Context, opts ...ListOption) ([]Payment, error) {
	u := c.root()
	if len(opts) > 0 {
		q := url.Values{}
		for _, o := range opts {
			o(q)
		}
		u += "?" + q.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	var l List
	if _, err := c.do(hr, &l); err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	return l.Payments, nil
}

// root always ends in "/": a mux mounted at ".../payments/" redirects the
// bare path, and a redirected POST silently becomes a GET.
func (c Client) root() string { return strings.TrimRight(c.BaseURL, "/") + "/" }

func (c Client) do(hr *http.Request, into any) (*http.Response, error) {
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("read response (%d): %w", resp.StatusCode, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb errorBody
		_ = json.Unmarshal(body, &eb) // a proxy's HTML error page is still reported below
		if resp.StatusCode == http.StatusUnprocessableEntity {
			return nil, &ConflictError{Key: eb.Key, Message: eb.Error}
		}
		msg := strings.TrimSpace(string(body))
		if eb.Error != "" {
			msg = eb.Error
		}
		if len(msg) > 1024 {
			msg = msg[:1024] + "..."
		}
		return nil, &StatusError{StatusCode: resp.StatusCode, Body: msg}
	}
	if err := json.Unmarshal(body, into); err != nil {
		return nil, fmt.Errorf("decode response (%d): %w", resp.StatusCode, err)
	}
	return resp, nil
}
