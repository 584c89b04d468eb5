package testenv

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// OTLP is an OTLP/HTTP trace receiver on a loopback port: it decodes
// what exporters POST to /v1/traces (protobuf, gzip or not) and keeps
// every span, with its resource's attributes.
type OTLP struct {
	URL string // the endpoint: set OTEL_EXPORTER_OTLP_ENDPOINT to it

	mu    sync.Mutex
	spans []Span
}

// Span is one received span.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	Start, End                time.Time
	Attrs                     map[string]string // the span's attributes, as strings
	Resource                  map[string]string // its resource's attributes
	Events                    []string
	Links                     []string // the trace ids the span links to
	StatusError               bool
}

// StartOTLP starts the receiver until the test ends.
func StartOTLP(t testing.TB) *OTLP {
	t.Helper()
	o := &OTLP{}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

// ServeHTTP receives OTLP/HTTP exports, for a test that serves them
// itself (over TLS, say).
func (o *OTLP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, "not an OTLP protobuf trace export: "+err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range req.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s := Span{TraceID: hex.EncodeToString(sp.TraceId), SpanID: hex.EncodeToString(sp.SpanId), ParentID: hex.EncodeToString(sp.ParentSpanId),
					Name: sp.Name, Start: time.Unix(0, int64(sp.StartTimeUnixNano)), End: time.Unix(0, int64(sp.EndTimeUnixNano)),
					Attrs: attrs(sp.Attributes), Resource: res, StatusError: sp.GetStatus().GetCode() == 2}
				for _, e := range sp.Events {
					s.Events = append(s.Events, e.Name)
				}
				for _, l := range sp.Links {
					s.Links = append(s.Links, hex.EncodeToString(l.TraceId))
				}
				got = append(got, s)
			}
		}
	}
	o.mu.Lock()
	o.spans = append(o.spans, got...)
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = protoValueString(kv.GetValue())
	}
	return m
}

func protoValueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return ""
}

// Spans returns what has been received so far.
func (o *OTLP) Spans() []Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Span(nil), o.spans...)
}
