package queue

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Step messages carry the W3C trace context of the span that published
// them, in a "traceparent" header (and "tracestate" when there is one),
// so that a run is one trace across workers, crashes and waits of days:
// the worker's span for a delivery is a child of it.

var traceContext = propagation.TraceContext{}

// headerCarrier reads and writes trace headers of a NATS message under
// their W3C names, as they are written (NATS headers are case-sensitive).
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectTrace writes the trace context of ctx's span into msg's headers.
// It writes nothing when ctx carries no valid span (tracing off).
func InjectTrace(ctx context.Context, msg *nats.Msg) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	traceContext.Inject(ctx, headerCarrier(msg.Header))
}

// ExtractTrace returns ctx with the remote span context that headers h
// carry, or ctx itself when they carry none.
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if len(h["traceparent"]) == 0 {
		return ctx
	}
	return traceContext.Extract(ctx, headerCarrier(h))
}
