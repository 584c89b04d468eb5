package service

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// otlpClient sends spans to an OTLP collector over http/protobuf or grpc,
// for go.opentelemetry.io/otel/exporters/otlp/otlptrace (which turns the
// SDK's spans into OTLP messages and calls UploadTraces).
//
// Why not OpenTelemetry's otlptracehttp and otlptracegrpc: both link
// google.golang.org/grpc, which links golang.org/x/net/trace, whose debug
// pages use html/template; a program that can reach a template's method
// calls keeps every exported method of every type, and the worker grew
// from 64 to 126 MB, the scheduler from 20 to 39. gRPC's unary call is a
// POST over HTTP/2 with a 5-byte frame and a status trailer, which
// net/http speaks (cleartext HTTP/2 since Go 1.24): this is that, for
// one method, configured from the same OTEL_EXPORTER_OTLP_* variables.
type otlpClient struct {
	grpc     bool
	url      string
	headers  http.Header
	gzip     bool
	timeout  time.Duration
	http     *http.Client
	endpoint string // as configured, for errors
}

// otlpEnv reads OTEL_EXPORTER_OTLP_TRACES_<name>, else OTEL_EXPORTER_OTLP_<name>.
func otlpEnv(name string) string { return os.Getenv(otlpVar(name)) }

// otlpVar is the variable otlpEnv(name) reads, for errors.
func otlpVar(name string) string {
	if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_"+name) != "" {
		return "OTEL_EXPORTER_OTLP_TRACES_" + name
	}
	return "OTEL_EXPORTER_OTLP_" + name
}

// newOTLPClient configures a client for protocol ("grpc" or
// "http/protobuf") from the environment.
func newOTLPClient(protocol string) (*otlpClient, error) {
	c := &otlpClient{grpc: protocol == "grpc", headers: http.Header{}, timeout: 10 * time.Second}
	traces := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	c.endpoint = traces
	if traces == "" {
		c.endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	u, err := url.Parse(c.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, Usagef("OTLP endpoint %q: want http://host:port or https://host:port", c.endpoint)
	}
	switch {
	case c.grpc:
		u.Path = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
	case traces == "":
		// The signal's path is appended to the base endpoint only.
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	c.url = u.String()
	for _, kv := range strings.Split(otlpEnv("HEADERS"), ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			continue
		}
		uk, err1 := url.QueryUnescape(strings.TrimSpace(k))
		uv, err2 := url.QueryUnescape(strings.TrimSpace(v))
		if err1 != nil || err2 != nil {
			return nil, Usagef("%s: %q is not key=value with URL-encoded parts", otlpVar("HEADERS"), kv)
		}
		c.headers.Set(uk, uv)
	}
	if t := otlpEnv("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return nil, Usagef("%s %q: want milliseconds", otlpVar("TIMEOUT"), t)
		}
		c.timeout = time.Duration(ms) * time.Millisecond
	}
	switch comp := otlpEnv("COMPRESSION"); comp {
	case "", "none":
	case "gzip":
		c.gzip = true
	default:
		return nil, Usagef("%s %q: want gzip or none", otlpVar("COMPRESSION"), comp)
	}
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	if c.grpc {
		// gRPC is HTTP/2 only: cleartext for http://, over TLS for https://.
		tr.Protocols = new(http.Protocols)
		if u.Scheme == "http" {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP2(true)
		}
	}
	if tr.TLSClientConfig, err = otlpTLS(); err != nil {
		return nil, err
	}
	c.http = &http.Client{Transport: tr}
	return c, nil
}

// otlpTLS is the TLS configuration of an https:// endpoint: the system's
// roots, or the CA certificates in the PEM file
// OTEL_EXPORTER_OTLP_(TRACES_)CERTIFICATE; a client certificate from
// _CLIENT_CERTIFICATE and _CLIENT_KEY (PEM files, both or neither). Nil
// when none is set.
func otlpTLS() (*tls.Config, error) {
	ca, cert, key := otlpEnv("CERTIFICATE"), otlpEnv("CLIENT_CERTIFICATE"), otlpEnv("CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, Usagef("%s: %v", otlpVar("CERTIFICATE"), err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, Usagef("%s %s: no PEM certificate in it", otlpVar("CERTIFICATE"), ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, Usagef("%s and %s go together: set both or neither", otlpVar("CLIENT_CERTIFICATE"), otlpVar("CLIENT_KEY"))
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, Usagef("%s and %s: %v", otlpVar("CLIENT_CERTIFICATE"), otlpVar("CLIENT_KEY"), err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}

func (c *otlpClient) Start(context.Context) error { return nil }

func (c *otlpClient) Stop(context.Context) error {
	c.http.CloseIdleConnections()
	return nil
}

// UploadTraces sends one ExportTraceServiceRequest.
func (c *otlpClient) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	var msg []byte
	for _, rs := range spans {
		b, err := proto.Marshal(rs)
		if err != nil {
			return fmt.Errorf("OTLP: encode spans: %w", err)
		}
		// ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendBytes(msg, b)
	}
	if c.gzip {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(msg)
		_ = zw.Close()
		msg = z.Bytes()
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body := msg
	if c.grpc {
		// A gRPC message: compressed flag, big-endian length, message.
		body = make([]byte, 5, 5+len(msg))
		if c.gzip {
			body[0] = 1
		}
		binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
		body = append(body, msg...)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range c.headers {
		req.Header[k] = v
	}
	if c.grpc {
		req.Header.Set("Content-Type", "application/grpc+proto")
		req.Header.Set("TE", "trailers")
		if c.gzip {
			req.Header.Set("Grpc-Encoding", "gzip")
		}
	} else {
		req.Header.Set("Content-Type", "application/x-protobuf")
		if c.gzip {
			req.Header.Set("Content-Encoding", "gzip")
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP export to %s: %w", c.endpoint, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // trailers come after the body
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("OTLP export to %s: HTTP %s", c.endpoint, resp.Status)
	}
	if c.grpc {
		status := resp.Trailer.Get("Grpc-Status")
		if status == "" {
			status = resp.Header.Get("Grpc-Status") // a trailers-only answer
		}
		if status != "0" {
			return fmt.Errorf("OTLP export to %s: gRPC status %q: %s", c.endpoint, status, resp.Trailer.Get("Grpc-Message")+resp.Header.Get("Grpc-Message"))
		}
	}
	return nil
}
