// Package providertest is a local HTTP server that speaks a provider's API
// from recorded fixtures, for the adapter tests: it answers a script of
// replies in order and keeps every request it got.
package providertest

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the request golden files in testdata/")

// Reply is one scripted answer: a status and a fixture file from testdata/.
type Reply struct {
	Status int
	File   string            // under testdata/
	Header map[string]string // extra response headers, e.g. retry-after
}

// Request is what the server got.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// Server answers Replies in order; a request past the script fails the test.
type Server struct {
	URL string

	t       testing.TB
	mu      sync.Mutex
	replies []Reply
	got     []Request
}

// Start serves script and closes the server when the test ends.
func Start(t testing.TB, script ...Reply) *Server {
	t.Helper()
	s := &Server{t: t, replies: script}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.got)
	s.got = append(s.got, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	s.mu.Unlock()
	if n >= len(s.replies) {
		s.t.Errorf("request %d past the script of %d replies", n+1, len(s.replies))
		http.Error(w, "unscripted", http.StatusTeapot)
		return
	}
	rep := s.replies[n]
	b, err := os.ReadFile(filepath.Join("testdata", rep.File))
	if err != nil {
		s.t.Errorf("fixture: %v", err)
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rep.Status)
	_, _ = w.Write(b)
}

// Requests returns what the server got so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.got...)
}

// AssertBody compares a request body with the golden file testdata/name as
// JSON values (key order and spacing do not matter). -update rewrites it.
func AssertBody(t testing.TB, name string, body []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			t.Fatalf("request body is not JSON: %v", err)
		}
		out.WriteByte('\n')
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden request (run with -update to write it): %v", err)
	}
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, body)
	}
	if !reflect.DeepEqual(w, g) {
		t.Errorf("request body differs from %s\ngot:  %s\nwant: %s", path, body, want)
	}
}
