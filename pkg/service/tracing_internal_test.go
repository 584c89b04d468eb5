package service

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/durable-run/durable/internal/test/testenv"
)

// grpcReceiver is an OTLP/gRPC trace receiver on a loopback port.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu       sync.Mutex
	services []string // service.name of each span received
}

func (r *grpcReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		name := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				name = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for range ss.Spans {
				r.services = append(r.services, name)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// restartTracing lets a test install tracing again, and puts OpenTelemetry's
// no-op provider back when it ends.
func restartTracing(t *testing.T) {
	tracingStarted.Store(false)
	t.Cleanup(func() {
		tracingStarted.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
	})
}

func sendSpan(t *testing.T, service string) {
	t.Helper()
	ctx := context.Background()
	shutdown, err := StartTracing(ctx, service)
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(ctx, "probe")
	span.End()
	if err := shutdown(ctx); err != nil { // flushes
		t.Fatal(err)
	}
}

func TestTracingOffWithoutEndpoint(t *testing.T) {
	restartTracing(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if _, err := StartTracing(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	if _, sdk := otel.GetTracerProvider().(interface{ ForceFlush(context.Context) error }); sdk {
		t.Error("a tracer provider was installed with no endpoint set")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if TracingConfigured() {
		t.Error("OTEL_SDK_DISABLED=true does not switch tracing off")
	}
}

func TestTracingRefusesUnknownProtocol(t *testing.T) {
	restartTracing(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err := StartTracing(context.Background(), "x")
	if !errors.As(err, new(UsageError)) {
		t.Fatalf("StartTracing with http/json: %v, want a usage error", err)
	}
}

func TestTracingExportsOverHTTP(t *testing.T) {
	restartTracing(t)
	otlp := testenv.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "svc-http")
	sendSpan(t, "durable-test")
	spans := otlp.Spans()
	if len(spans) != 1 || spans[0].Name != "probe" || spans[0].Resource["service.name"] != "svc-http" {
		t.Fatalf("received %+v, want one span probe of svc-http", spans)
	}
}

func TestTracingExportsOverGRPC(t *testing.T) {
	restartTracing(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &grpcReceiver{}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, recv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
	sendSpan(t, "durable-grpc")
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.services) != 1 || recv.services[0] != "durable-grpc" {
		t.Fatalf("received spans of %v, want one of durable-grpc (the default service name)", recv.services)
	}
}
