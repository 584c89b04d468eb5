package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// StartTracing installs OpenTelemetry tracing for a durable process, from
// the standard variables, and returns what flushes and stops it.
//
// Tracing is on when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not
// "true"); otherwise nothing is installed, the global tracer provider stays
// OpenTelemetry's no-op one and the instrumentation costs close to
// nothing. The protocol comes from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc (see
// otlp.go: our client, not OpenTelemetry's, to keep gRPC's dependencies
// out of every binary). Also read: OTEL_EXPORTER_OTLP_(TRACES_)HEADERS,
// _TIMEOUT, _COMPRESSION (gzip), and for https:// endpoints _CERTIFICATE
// (CA file; the system's roots without it), _CLIENT_CERTIFICATE and
// _CLIENT_KEY (mutual TLS). The resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES (service.name defaults to service), the
// sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG, the batching
// OTEL_BSP_*. W3C trace context is the propagator.
func StartTracing(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	if !TracingConfigured() || !tracingStarted.CompareAndSwap(false, true) {
		return off, nil // off, or started already by the command that runs this one
	}
	p := tracesProtocol()
	if p == "" {
		p = "http/protobuf"
	}
	if p != "http/protobuf" && p != "grpc" {
		return off, Usagef("OTEL_EXPORTER_OTLP_PROTOCOL %q: durable exports traces over http/protobuf or grpc", p)
	}
	client, err := newOTLPClient(p)
	if err != nil {
		return off, err
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return off, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)), // overridden by OTEL_SERVICE_NAME
		resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithProcessPID(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return off, fmt.Errorf("trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

var tracingStarted atomic.Bool

// TracingConfigured reports whether the environment asks for traces.
func TracingConfigured() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

func tracesProtocol() string {
	if p := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"); p != "" {
		return p
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
}

// StopTracing flushes the spans StartTracing's provider holds and stops
// it, within 5 seconds; for a defer at the end of main.
func StopTracing(shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = shutdown(ctx)
}
