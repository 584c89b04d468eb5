package payments

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

const prefix = "/demo/payments"

const body1840 = `{"run_id":"claim-0042","claim":"CLM-0042","amount":1840,"currency":"EUR","payee":"J. Doe"}`

type env struct {
	srv    *Server
	path   string
	url    string // where the API is mounted
	client Client
}

// start serves a Server on 127.0.0.1 the way `durable dev` mounts it, so the
// tests cover the StripPrefix routing too.
func start(tb testing.TB, path string) *env {
	tb.Helper()
	if path == "" {
		path = filepath.Join(tb.TempDir(), "payments.jsonl")
	}
	srv, err := Open(path)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, srv.Handler()))
	hs := httptest.NewServer(mux) // listens on 127.0.0.1
	tb.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	return &env{srv: srv, path: path, url: hs.URL + prefix, client: Client{BaseURL: hs.URL + prefix, HTTP: hs.Client()}}
}

// post sends a raw POST so tests can send what the typed client never would.
func (e *env) post(tb testing.TB, key, body string) (*http.Response, []byte) {
	tb.Helper()
	resp, b, err := e.tryPost(key, body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp, b
}

// tryPost is post for goroutines, which must not call Fatal.
func (e *env) tryPost(key, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, e.url+"/", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := e.client.HTTP.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("POST: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (e *env) list(tb testing.TB, query string) List {
	tb.Helper()
	resp, err := e.client.HTTP.Get(e.url + "/" + query)
	if err != nil {
		tb.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET status %d", resp.StatusCode)
	}
	var l List
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		tb.Fatalf("decode list: %v", err)
	}
	return l
}

func decode[T any](tb testing.TB, b []byte) T {
	tb.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		tb.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func TestPayOnce(t *testing.T) {
	e := start(t, "")
	resp, b := e.post(t, "claim-0042:step6", body1840)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if h := resp.Header.Get("Idempotent-Replayed"); h != "" {
		t.Errorf("first request has Idempotent-Replayed: %q", h)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	p := decode[Payment](t, b)
	want := Payment{ID: "pay_000001", Key: "claim-0042:step6", Amount: 1840, Currency: "EUR",
		RunID: "claim-0042", Claim: "CLM-0042", Payee: "J. Doe", Requests: 1}
	got := p
	got.BodySHA256, got.CreatedAt = "", time.Time{}
	if got != want {
		t.Errorf("payment\n got %+v\nwant %+v", got, want)
	}
	if len(p.BodySHA256) != 64 || p.CreatedAt.IsZero() {
		t.Errorf("body_sha256 %q created_at %v", p.BodySHA256, p.CreatedAt)
	}
	l := e.list(t, "")
	if l.Count != 1 || l.Total != 1840 || len(l.Payments) != 1 || l.Payments[0] != p {
		t.Errorf("list %+v", l)
	}
}

func TestReplayAndConflict(t *testing.T) {
	tests := []struct {
		name     string
		second   string
		status   int
		replayed bool
	}{
		{"same body", body1840, http.StatusOK, true},
		{"same body, other key order and whitespace", `{ "payee": "J. Doe", "amount": 1840,
			"currency": "EUR", "claim": "CLM-0042", "run_id": "claim-0042" }`, http.StatusOK, true},
		{"other amount", strings.Replace(body1840, "1840", "1841", 1), http.StatusUnprocessableEntity, false},
		{"other payee", strings.Replace(body1840, "J. Doe", "M. Roe", 1), http.StatusUnprocessableEntity, false},
		{"extra field", strings.Replace(body1840, "}", `,"note":"x"}`, 1), http.StatusUnprocessableEntity, false},
		{"missing field", `{"run_id":"claim-0042","claim":"CLM-0042","amount":1840,"currency":"EUR"}`, http.StatusUnprocessableEntity, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := start(t, "")
			const key = "claim-0042:step6"
			_, b := e.post(t, key, body1840)
			first := decode[Payment](t, b)

			resp, b := e.post(t, key, tt.second)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if got := resp.Header.Get("Idempotent-Replayed") == "true"; got != tt.replayed {
				t.Errorf("Idempotent-Replayed %v, want %v", got, tt.replayed)
			}
			l := e.list(t, "")
			if l.Count != 1 {
				t.Fatalf("%d payments, want 1", l.Count)
			}
			if tt.replayed {
				p := decode[Payment](t, b)
				want := first
				want.Requests = 2
				if p != want || l.Payments[0] != want {
					t.Errorf("replay answered %+v, list %+v, want %+v", p, l.Payments[0], want)
				}
				return
			}
			eb := decode[errorBody](t, b)
			if eb.Code != "idempotency_conflict" || eb.Key != key ||
				!strings.Contains(eb.Error, key) || !strings.Contains(eb.Error, "differs from the original request") {
				t.Errorf("conflict body %+v", eb)
			}
			if l.Payments[0] != first {
				t.Errorf("conflict changed the payment: %+v, was %+v", l.Payments[0], first)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	tests := []struct {
		name, key, body string
		status          int
		code, mention   string
	}{
		{"missing key", "", body1840, 400, "missing_idempotency_key", "Idempotency-Key header is required"},
		{"blank key", "   ", body1840, 400, "missing_idempotency_key", "Idempotency-Key header is required"},
		{"key too long", strings.Repeat("k", 256), body1840, 400, "invalid_idempotency_key", "at most 255"},
		{"empty body", "k", "", 400, "invalid_body", "empty"},
		{"malformed JSON", "k", `{"amount": 18`, 400, "invalid_body", "not valid JSON"},
		{"not an object", "k", `[1840]`, 400, "invalid_body", "JSON object"},
		{"trailing data", "k", body1840 + `{}`, 400, "invalid_body", "after the JSON object"},
		{"no amount", "k", `{"currency":"EUR"}`, 400, "invalid_body", "amount is required"},
		{"null amount", "k", `{"amount":null}`, 400, "invalid_body", "amount is required"},
		{"zero amount", "k", `{"amount":0}`, 400, "invalid_body", "greater than 0"},
		{"negative amount", "k", `{"amount":-5}`, 400, "invalid_body", "greater than 0"},
		{"string amount", "k", `{"amount":"1840"}`, 400, "invalid_body", "amount must be a number"},
		{"fractional amount", "k", `{"amount":18.40}`, 400, "invalid_body", "positive integer"},
		{"huge amount", "k", `{"amount":1e30}`, 400, "invalid_body", "positive integer"},
		{"numeric payee", "k", `{"amount":1,"payee":7}`, 400, "invalid_body", "payee must be a string"},
		{"body too large", "k", `{"amount":1,"payee":"` + strings.Repeat("x", 64<<10) + `"}`, 413, "body_too_large", "exceeds"},
	}
	e := start(t, "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := e.post(t, tt.key, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			eb := decode[errorBody](t, b)
			if eb.Code != tt.code || !strings.Contains(eb.Error, tt.mention) {
				t.Errorf("error %+v, want code %q mentioning %q", eb, tt.code, tt.mention)
			}
		})
	}
	if l := e.list(t, ""); l.Count != 0 {
		t.Errorf("bad requests recorded %d payments", l.Count)
	}
}

func TestRouting(t *testing.T) {
	e := start(t, "")
	for _, tt := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/", 200},
		{http.MethodDelete, "/", 405},
		{http.MethodGet, "/pay_000001", 404},
	} {
		req, _ := http.NewRequest(tt.method, e.url+tt.path, nil)
		resp, err := e.client.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
	}
	// Mounted with a bare prefix the root arrives as "", not "/".
	srv := e.srv
	hs := httptest.NewServer(http.StripPrefix(prefix, srv.Handler()))
	defer hs.Close()
	resp, err := hs.Client().Get(hs.URL + prefix)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET bare prefix: %d", resp.StatusCode)
	}
}

func TestListFilters(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	for i, run := range []string{"claim-1", "claim-2", "claim-1"} {
		req := PayRequest{RunID: run, Amount: int64(100 * (i + 1)), Currency: "EUR"}
		if _, _, err := e.client.Pay(ctx, fmt.Sprintf("%s:step%d", run, i), req); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		query string
		ids   []string
		total int64
	}{
		{"", []string{"pay_000001", "pay_000002", "pay_000003"}, 600},
		{"?run_id=claim-1", []string{"pay_000001", "pay_000003"}, 400},
		{"?key=claim-2:step1", []string{"pay_000002"}, 200},
		{"?key=claim-2:step1&run_id=claim-1", nil, 0},
		{"?key=nope", nil, 0},
	}
	for _, tt := range tests {
		l := e.list(t, tt.query)
		var ids []string
		for _, p := range l.Payments {
			ids = append(ids, p.ID)
		}
		if !reflect.DeepEqual(ids, tt.ids) || l.Count != len(tt.ids) || l.Total != tt.total {
			t.Errorf("GET %q: ids %v count %d total %d, want %v %d", tt.query, ids, l.Count, l.Total, tt.ids, tt.total)
		}
		if l.Payments == nil {
			t.Errorf("GET %q: payments is null, want []", tt.query)
		}
	}
}

func TestConcurrentSameKey(t *testing.T) {
	e := start(t, "")
	const n = 50
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			resp, b, err := e.tryPost("claim-0042:step6", body1840)
			if err != nil {
				t.Error(err)
				return
			}
			if resp.StatusCode == http.StatusOK && resp.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("200 without Idempotent-Replayed: %s", b)
			}
			statuses <- resp.StatusCode
		})
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[201] != 1 || count[200] != n-1 {
		t.Errorf("statuses %v, want one 201 and %d 200", count, n-1)
	}
	l := e.list(t, "")
	if l.Count != 1 || l.Payments[0].Requests != n {
		t.Errorf("list %+v, want 1 payment with %d requests", l, n)
	}
}

func TestConcurrentDistinctKeys(t *testing.T) {
	e := start(t, "")
	const n = 50
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, _, err := e.client.Pay(context.Background(), fmt.Sprintf("k%d", i), PayRequest{Amount: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	l := e.list(t, "")
	ids := map[string]bool{}
	for i, p := range l.Payments {
		ids[p.ID] = true
		if want := fmt.Sprintf("pay_%06d", i+1); p.ID != want {
			t.Errorf("payment %d has id %s, want %s", i, p.ID, want)
		}
	}
	if l.Count != n || len(ids) != n || l.Total != n {
		t.Errorf("count %d, distinct ids %d, total %d; want %d each", l.Count, len(ids), l.Total, n)
	}
}

func TestReopenKeepsPaymentsAndCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "payments.jsonl") // Open creates the directory
	e := start(t, path)
	ctx := context.Background()
	req := PayRequest{RunID: "claim-0042", Claim: "CLM-0042", Amount: 1840, Currency: "EUR", Payee: "J. Doe"}
	for range 3 {
		if _, _, err := e.client.Pay(ctx, "claim-0042:step6", req); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.client.Pay(ctx, "claim-0043:step6", PayRequest{Amount: 10}); err != nil {
		t.Fatal(err)
	}
	before := e.list(t, "")
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}

	e2 := start(t, path)
	after := e2.list(t, "")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("after reopen\n got %+v\nwant %+v", after, before)
	}
	if after.Payments[0].Requests != 3 {
		t.Errorf("requests %d, want 3", after.Payments[0].Requests)
	}
	// The reopened server keeps numbering and still recognises old keys.
	p, replayed, err := e2.client.Pay(ctx, "claim-0042:step6", req)
	if err != nil || !replayed || p.ID != "pay_000001" || p.Requests != 4 {
		t.Errorf("replay after reopen: %+v replayed=%v err=%v", p, replayed, err)
	}
	p, _, err = e2.client.Pay(ctx, "claim-0044:step6", PayRequest{Amount: 1})
	if err != nil || p.ID != "pay_000003" {
		t.Errorf("new payment after reopen: %+v err=%v", p, err)
	}
}

func TestTornTailIsCutOnOpen(t *testing.T) {
	tests := []struct{ name, tail string }{
		{"partial line", `{"id":"pay_000003","key":"k3","amou`},
		{"zero-filled block", strings.Repeat("\x00", 512)},
		{"complete but garbled last line", "{\"id\":\"pay_0\x00\x00\n"},
		{"garbled line then partial line", "not json\n{\"id\":"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "payments.jsonl")
			e := start(t, path)
			ctx := context.Background()
			for _, k := range []string{"k1", "k2", "k1"} {
				if _, _, err := e.client.Pay(ctx, k, PayRequest{Amount: 5}); err != nil {
					t.Fatal(err)
				}
			}
			before := e.list(t, "")
			e.srv.Close()
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			appendFile(t, path, tt.tail)

			e2 := start(t, path)
			if after := e2.list(t, ""); !reflect.DeepEqual(before, after) {
				t.Fatalf("after torn tail\n got %+v\nwant %+v", after, before)
			}
			if now, _ := os.ReadFile(path); string(now) != string(good) {
				t.Errorf("torn tail not cut: file has %d bytes, want %d", len(now), len(good))
			}
			// Appends after the repair must land on a clean line boundary.
			if _, _, err := e2.client.Pay(ctx, "k3", PayRequest{Amount: 5}); err != nil {
				t.Fatal(err)
			}
			e2.srv.Close()
			e3 := start(t, path)
			if l := e3.list(t, ""); l.Count != 3 || l.Payments[2].ID != "pay_000003" {
				t.Errorf("after repair and append: %+v", l)
			}
		})
	}
}

func TestCorruptMiddleFailsOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "payments.jsonl")
	e := start(t, path)
	if _, _, err := e.client.Pay(context.Background(), "k1", PayRequest{Amount: 5}); err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	good, _ := os.ReadFile(path)
	appendFile(t, path, "garbage\n"+string(good))
	if s, err := Open(path); err == nil {
		s.Close()
		t.Fatal("Open accepted a corrupt line followed by records")
	} else if !strings.Contains(err.Error(), "line 2") {
		t.Errorf("error does not say where: %v", err)
	}
}

func TestClosedServerAnswers503(t *testing.T) {
	e := start(t, "")
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	resp, b := e.post(t, "k", body1840)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d: %s", resp.StatusCode, b)
	}
}

// A failed write must not be half-remembered: the payment is not answered,
// later writes are refused rather than risk a record after a torn one, and a
// restart recovers everything answered before.
func TestWriteFailureStopsWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "payments.jsonl")
	e := start(t, path)
	if resp, b := e.post(t, "k1", body1840); resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	e.srv.file.f.Close() // the next write fails as a full or failing disk would

	for _, key := range []string{"k2", "k1", "k3"} {
		resp, b := e.post(t, key, body1840)
		if eb := decode[errorBody](t, b); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(eb.Error, "restart") {
			t.Errorf("%s after failed write: %d %+v", key, resp.StatusCode, eb)
		}
	}
	if l := e.list(t, ""); l.Count != 1 || l.Payments[0].Requests != 1 {
		t.Errorf("failed writes changed memory: %+v", l)
	}
	e2 := start(t, path)
	if l := e2.list(t, ""); l.Count != 1 || l.Payments[0].Key != "k1" {
		t.Errorf("after restart: %+v", l)
	}
}

func TestClient(t *testing.T) {
	e := start(t, "")
	ctx := context.Background()
	req := PayRequest{RunID: "claim-0042", Claim: "CLM-0042", Amount: 1840, Currency: "EUR", Payee: "J. Doe"}

	for _, base := range []string{e.url, e.url + "/"} {
		c := Client{BaseURL: base, HTTP: e.client.HTTP}
		p, replayed, err := c.Pay(ctx, "claim-0042:step6", req)
		if err != nil {
			t.Fatalf("Pay via %s: %v", base, err)
		}
		if wantReplay := base != e.url; replayed != wantReplay || p.ID != "pay_000001" || p.Amount != 1840 {
			t.Errorf("Pay via %s: %+v replayed=%v", base, p, replayed)
		}
	}

	other := req
	other.Amount = 1841
	_, _, err := e.client.Pay(ctx, "claim-0042:step6", other)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Key != "claim-0042:step6" || !errors.Is(err, ErrConflict) {
		t.Errorf("conflict: %v (%T)", err, err)
	}

	bad := req
	bad.Amount = 0
	_, _, err = e.client.Pay(ctx, "claim-0042:step7", bad)
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != 400 || !strings.Contains(se.Body, "amount") {
		t.Errorf("bad request: %v (%T)", err, err)
	}
	if _, _, err := e.client.Pay(ctx, "", req); err == nil {
		t.Error("Pay with empty key succeeded")
	}

	all, err := e.client.List(ctx)
	if err != nil || len(all) != 1 || all[0].Requests != 2 {
		t.Errorf("List: %+v %v", all, err)
	}
	none, err := e.client.List(ctx, WithRunID("claim-0099"))
	if err != nil || len(none) != 0 {
		t.Errorf("List(run claim-0099): %+v %v", none, err)
	}
	one, err := e.client.List(ctx, WithKey("claim-0042:step6"), WithRunID("claim-0042"))
	if err != nil || len(one) != 1 {
		t.Errorf("List(key, run): %+v %v", one, err)
	}

	down := Client{BaseURL: "http://127.0.0.1:1/demo/payments"}
	if _, err := down.List(ctx); err == nil {
		t.Error("List against a closed port succeeded")
	}
}

// TestSurvivesSIGKILL kills the serving process right after each 2xx and
// checks the file still holds everything that was answered.
func TestSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test")
	}
	path := filepath.Join(t.TempDir(), "payments.jsonl")
	ctx := context.Background()
	req := PayRequest{RunID: "claim-0042", Amount: 1840, Currency: "EUR"}
	steps := []struct {
		key          string
		wantReplayed bool
	}{{"claim-0042:step6", false}, {"claim-0042:step6", true}, {"claim-0043:step6", false}}
	for i, st := range steps {
		c := startChild(t, path)
		p, replayed, err := c.Pay(ctx, st.key, req)
		c.kill()
		if err != nil || replayed != st.wantReplayed {
			t.Fatalf("step %d: %+v replayed=%v err=%v", i, p, replayed, err)
		}
		s, err := Open(path)
		if err != nil {
			t.Fatalf("reopen after SIGKILL: %v", err)
		}
		got := s.list[s.byKey[st.key]]
		s.Close()
		if got != p {
			t.Fatalf("step %d: after SIGKILL file holds %+v, server answered %+v", i, got, p)
		}
	}
}

type child struct {
	Client
	cmd *exec.Cmd
}

func (c *child) kill() {
	_ = c.cmd.Process.Kill() // SIGKILL: no deferred Close, no flush
	_ = c.cmd.Wait()
}

func startChild(tb testing.TB, path string) *child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperServe$")
	cmd.Env = append(os.Environ(), "PAYMENTS_HELPER_FILE="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{cmd: cmd}
	tb.Cleanup(c.kill)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTENING "); ok {
				addr <- a
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case a := <-addr:
		c.Client = Client{BaseURL: "http://" + a + prefix}
	case <-time.After(20 * time.Second):
		tb.Fatal("helper process did not start listening")
	}
	return c
}

// TestHelperServe is the child process of TestSurvivesSIGKILL, not a test.
func TestHelperServe(t *testing.T) {
	path := os.Getenv("PAYMENTS_HELPER_FILE")
	if path == "" {
		t.Skip("helper process for TestSurvivesSIGKILL")
	}
	srv, err := Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.Handle(prefix+"/", http.StripPrefix(prefix, srv.Handler()))
	hs := httptest.NewServer(mux)
	fmt.Printf("LISTENING %s\n", strings.TrimPrefix(hs.URL, "http://"))
	select {} // until SIGKILL
}

func appendFile(tb testing.TB, path, s string) {
	tb.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		tb.Fatal(err)
	}
}
