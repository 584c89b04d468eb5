package service

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

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

// selfSigned writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key to dir, as PEM files.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// mutualTLS is a server's TLS configuration with certificate server that
// requires a client certificate signed by clientCA.
func mutualTLS(t *testing.T, server tls.Certificate, clientCA string) *tls.Config {
	t.Helper()
	pemBytes, err := os.ReadFile(clientCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	return &tls.Config{Certificates: []tls.Certificate{server}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

func TestTracingExportsOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCrt, _, serverPair := selfSigned(t, dir, "collector")
	clientCrt, clientKey, _ := selfSigned(t, dir, "worker")

	t.Run("http", func(t *testing.T) {
		restartTracing(t)
		otlp := &testenv.OTLP{}
		srv := httptest.NewUnstartedServer(otlp)
		srv.TLS = mutualTLS(t, serverPair, clientCrt)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
		t.Setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", serverCrt)
		t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", clientCrt)
		t.Setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", clientKey)
		sendSpan(t, "durable-mtls")
		if spans := otlp.Spans(); len(spans) != 1 || spans[0].Resource["service.name"] != "durable-mtls" {
			t.Fatalf("received %+v, want one span of durable-mtls", spans)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		restartTracing(t)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		recv := &grpcReceiver{}
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(mutualTLS(t, serverPair, clientCrt))))
		coltracepb.RegisterTraceServiceServer(srv, recv)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://"+lis.Addr().String())
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", serverCrt)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", clientCrt)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", clientKey)
		sendSpan(t, "durable-grpc-mtls")
		recv.mu.Lock()
		defer recv.mu.Unlock()
		if len(recv.services) != 1 || recv.services[0] != "durable-grpc-mtls" {
			t.Fatalf("received spans of %v, want one of durable-grpc-mtls", recv.services)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		notPEM := filepath.Join(dir, "not.pem")
		if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			env  map[string]string
		}{
			{"missing CA file", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "absent.pem")}},
			{"CA file without a certificate", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": notPEM}},
			{"certificate without key", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": clientCrt}},
			{"key without certificate", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey}},
			{"key of another certificate", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": serverCrt, "OTEL_EXPORTER_OTLP_CLIENT_KEY": clientKey}},
		} {
			t.Run(c.name, func(t *testing.T) {
				restartTracing(t)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:1")
				for k, v := range c.env {
					t.Setenv(k, v)
				}
				_, err := StartTracing(context.Background(), "x")
				if !errors.As(err, new(UsageError)) {
					t.Fatalf("StartTracing: %v, want a usage error", err)
				}
				if _, sdk := otel.GetTracerProvider().(interface{ ForceFlush(context.Context) error }); sdk {
					t.Error("a tracer provider was installed although the TLS settings were refused")
				}
			})
		}
	})
}
