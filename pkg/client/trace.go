package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// A run is one trace (OpenTelemetry, W3C trace context): Start opens its
// root span and stores its traceparent in the run record (Run.Trace);
// whatever acts on the run later (a decision, a signal, an expiry, a
// redrive, a cancel) makes a span of its own in that trace, and the step
// messages it publishes carry it (queue.InjectTrace), so the worker's span
// of the delivery continues it. With tracing off (no tracer provider
// installed) the spans are OpenTelemetry's no-op ones and Run.Trace stays
// empty.

var tracer = otel.Tracer("github.com/durable-run/durable/pkg/client")

// Span attributes of durable's spans.
const (
	AttrRunID    = attribute.Key("durable.run_id")
	AttrWorkflow = attribute.Key("durable.workflow")
	AttrStep     = attribute.Key("durable.step")
	AttrStepName = attribute.Key("durable.step_name")
)

func runAttrs(run checkpoint.Run) []attribute.KeyValue {
	return []attribute.KeyValue{AttrRunID.String(run.ID), AttrWorkflow.String(run.Workflow), AttrStep.Int(run.Step), AttrStepName.String(run.StepName)}
}

// traceparent is the W3C traceparent of ctx's span, "" without one.
func traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// RunContext returns ctx in the trace of run: with run's root span as
// the remote parent, unless ctx already carries a span of that trace. A
// run started with tracing off has no trace: ctx is returned as it is.
func RunContext(ctx context.Context, run checkpoint.Run) context.Context {
	if run.Trace == "" {
		return ctx
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": run.Trace}))
	if !sc.IsValid() {
		return ctx
	}
	if cur := trace.SpanContextFromContext(ctx); cur.IsValid() && cur.TraceID() == sc.TraceID() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// runSpan starts span name in run's trace.
func runSpan(ctx context.Context, run checkpoint.Run, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return tracer.Start(RunContext(ctx, run), name, trace.WithAttributes(runAttrs(run)...), trace.WithAttributes(attrs...))
}

// endSpan records err on span, if any, and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// tracingOn says whether a tracer provider that records is installed (an
// SDK's has ForceFlush; OpenTelemetry's default no-op one has not).
func tracingOn() bool {
	_, sdk := otel.GetTracerProvider().(interface{ ForceFlush(context.Context) error })
	return sdk
}

// actionSpan starts span name for an action on run id, in the run's trace
// when tracing is on (it reads the run for its trace context first).
func (c *Client) actionSpan(ctx context.Context, id, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tracingOn() {
		if run, err := c.store.GetRun(ctx, id); err == nil {
			return runSpan(ctx, run, name, attrs...)
		}
	}
	return tracer.Start(ctx, name, trace.WithAttributes(AttrRunID.String(id)), trace.WithAttributes(attrs...))
}

// TraceID is the trace id (32 hex digits) of run's trace, "" when the run
// was started with tracing off.
func TraceID(run checkpoint.Run) string {
	sc := trace.SpanContextFromContext(RunContext(context.Background(), run))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
