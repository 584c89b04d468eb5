package approver_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The embedded nats-server and go-redis keep background goroutines
		// that end shortly after their owners are closed.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func errorBody(t *testing.T, b []byte) approver.ErrorBody {
	t.Helper()
	var e approver.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error == "" || e.Code == "" {
		t.Fatalf("error body %s: %v", b, err)
	}
	return e
}

// Every bad approval is refused with its status and changes nothing.
func TestBadApprovalsChangeNothing(t *testing.T) {
	h := newHarness(t, "redis", nil)
	run := h.park("claim-1", "ana", "adjusters")
	sha := run.Wait.PayloadSHA256
	other := strings.Repeat("ab", 32)

	// A run that is no longer waiting: decided by an operator, completed.
	h.park("claim-done", "", "adjusters")
	if _, err := h.client.Decide(context.Background(), client.Decision{RunID: "claim-done", By: "op", Channel: client.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	done := h.waitStatus("claim-done", checkpoint.StatusCompleted)
	doneSHA := done.Approvals[0].PayloadSHA256

	ana, bo, cy := h.tokens["ana"], h.tokens["bo"], h.tokens["cy"]
	approve := "/api/approvals/claim-1/approve"
	for _, tc := range []struct {
		name   string
		path   string
		token  string
		body   string
		header map[string]string
		status int
		code   string
		run    checkpoint.Run
	}{
		{"no token", approve, "", decision(sha, 0, ""), nil, 401, approver.CodeUnauthorized, run},
		{"wrong token", approve, bo + "x", decision(sha, 0, ""), nil, 401, approver.CodeUnauthorized, run},
		{"token of the wrong scheme", approve, "", decision(sha, 0, ""), map[string]string{"Authorization": "Basic " + bo}, 401, approver.CodeUnauthorized, run},
		{"wrong group", approve, cy, decision(sha, 0, ""), nil, 403, approver.CodeForbidden, run},
		{"wrong group, stale hash too", approve, cy, decision(other, 0, ""), nil, 403, approver.CodeForbidden, run},
		{"four eyes", approve, ana, decision(sha, 0, ""), nil, 403, approver.CodeForbidden, run},
		{"four eyes, reject", "/api/approvals/claim-1/reject", ana, decision(sha, 0, ""), nil, 403, approver.CodeForbidden, run},
		{"unknown run", "/api/approvals/claim-nope/approve", bo, decision(sha, 0, ""), nil, 404, approver.CodeNotFound, run},
		{"run id that can't exist", "/api/approvals/claim.1/approve", bo, decision(sha, 0, ""), nil, 404, approver.CodeNotFound, run},
		{"not waiting", "/api/approvals/claim-done/approve", bo, decision(doneSHA, 0, ""), nil, 409, approver.CodeNotWaiting, done},
		{"wrong step", approve, bo, decision(sha, 2, ""), nil, 409, approver.CodeWrongStep, run},
		{"stale hash", approve, bo, decision(other, 0, ""), nil, 409, approver.CodeStaleHash, run},
		{"malformed JSON", approve, bo, `{"payload_sha256": "` + sha, nil, 400, approver.CodeBadRequest, run},
		{"not an object", approve, bo, `["` + sha + `"]`, nil, 400, approver.CodeBadRequest, run},
		{"unknown field", approve, bo, `{"payload_sha256": "` + sha + `", "by": "ceo"}`, nil, 400, approver.CodeBadRequest, run},
		{"trailing data", approve, bo, decision(sha, 0, "") + `{}`, nil, 400, approver.CodeBadRequest, run},
		{"empty body", approve, bo, "", nil, 400, approver.CodeBadRequest, run},
		{"missing hash", approve, bo, `{"reason": "looks fine"}`, nil, 400, approver.CodeBadRequest, run},
		{"hash that is no hash", approve, bo, `{"payload_sha256": "0000"}`, nil, 400, approver.CodeBadRequest, run},
		{"negative step", approve, bo, decision(sha, -1, ""), nil, 400, approver.CodeBadRequest, run},
		{"oversized body", approve, bo, `{"payload_sha256": "` + sha + `", "reason": "` + strings.Repeat("x", 70<<10) + `"}`, nil, 413, approver.CodeTooLarge, run},
		{"unknown action", "/api/approvals/claim-1/escalate", bo, decision(sha, 0, ""), nil, 404, approver.CodeNotFound, run},
		{"GET on a decision", approve, bo, "", nil, 405, approver.CodeMethodNotAllowed, run},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := http.MethodPost
			if tc.status == 405 {
				method = http.MethodGet
			}
			status, hdr, body := h.do(method, tc.path, tc.token, tc.body, tc.header)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			e := errorBody(t, body)
			if e.Code != tc.code {
				t.Errorf("code %q, want %q (%s)", e.Code, tc.code, e.Error)
			}
			if status == 401 && !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate: Bearer")
			}
			if strings.Contains(e.Error, sha) && tc.code != approver.CodeNotWaiting {
				t.Errorf("the refusal names the pending hash: %s", e.Error)
			}
			h.assertUnchanged(tc.run)
		})
	}

	// The same run is then decided by someone allowed to.
	status, _, body := h.do(http.MethodPost, approve, bo, decision(sha, 1, "ok"), nil)
	if status != 200 {
		t.Fatalf("approve: %d %s", status, body)
	}
	h.waitStatus("claim-1", checkpoint.StatusCompleted)
}

func TestApproveAndRejectOverHTTP(t *testing.T) {
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind, nil)
			yes := h.park("claim-yes", "ana", "adjusters")
			no := h.park("claim-no", "ana", "adjusters")

			status, _, body := h.do(http.MethodGet, "/api/approvals/claim-yes", h.tokens["bo"], "", nil)
			if status != 200 {
				t.Fatalf("GET: %d %s", status, body)
			}
			var a approver.Approval
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatal(err)
			}
			if a.RunID != "claim-yes" || a.Step != 1 || a.StepName != "ask" || a.Group != "adjusters" || a.PayloadSHA256 != yes.Wait.PayloadSHA256 ||
				string(a.Payload) != string(yes.Wait.Payload) || a.Workflow != "approval" || a.Deadline.IsZero() || a.Since.IsZero() {
				t.Fatalf("approval %+v", a)
			}

			status, _, body = h.do(http.MethodPost, "/api/approvals/claim-yes/approve", h.tokens["bo"], decision(a.PayloadSHA256, 1, "within policy"), nil)
			if status != 200 {
				t.Fatalf("approve: %d %s", status, body)
			}
			var res approver.DecisionResult
			if err := json.Unmarshal(body, &res); err != nil {
				t.Fatal(err)
			}
			if res.RunID != "claim-yes" || res.Decision != checkpoint.DecisionApproved || res.By != "bo" || res.Channel != client.ChannelAPI || res.PayloadSHA256 != a.PayloadSHA256 {
				t.Fatalf("result %+v", res)
			}
			got := h.waitStatus("claim-yes", checkpoint.StatusCompleted)
			if len(got.Approvals) != 1 {
				t.Fatalf("approvals %+v", got.Approvals)
			}
			ap := got.Approvals[0]
			if ap.By != "bo" || ap.Channel != client.ChannelAPI || ap.Decision != checkpoint.DecisionApproved || ap.Step != 1 ||
				ap.PayloadSHA256 != yes.Wait.PayloadSHA256 || string(ap.Payload) != string(yes.Wait.Payload) || ap.Reason != "within policy" {
				t.Fatalf("approval recorded %+v", ap)
			}
			cp, err := h.store.Checkpoint(context.Background(), "claim-yes", 1)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(cp.State), "approved-by-bo-via-api") {
				t.Fatalf("the step did not resume with bo's approval: %s", cp.State)
			}
			// Deciding again: not waiting any more.
			status, _, body = h.do(http.MethodPost, "/api/approvals/claim-yes/reject", h.tokens["bo"], decision(a.PayloadSHA256, 0, ""), nil)
			if status != 409 || errorBody(t, body).Code != approver.CodeNotWaiting {
				t.Fatalf("second decision: %d %s", status, body)
			}
			status, _, body = h.do(http.MethodGet, "/api/approvals/claim-yes", h.tokens["bo"], "", nil)
			if status != 409 || errorBody(t, body).Code != approver.CodeNotWaiting {
				t.Fatalf("GET of a decided run: %d %s", status, body)
			}

			// A rejection from the inbox page.
			status, _, body = h.do(http.MethodPost, "/api/approvals/claim-no/reject", h.tokens["dee"], decision(no.Wait.PayloadSHA256, 0, "duplicate claim"),
				map[string]string{approver.ChannelHeader: "page"})
			if status != 200 {
				t.Fatalf("reject: %d %s", status, body)
			}
			failed := h.waitStatus("claim-no", checkpoint.StatusFailed)
			if failed.Error != "rejected by dee" {
				t.Errorf("error %q", failed.Error)
			}
			ap = failed.Approvals[0]
			if len(failed.Approvals) != 1 || ap.By != "dee" || ap.Channel != client.ChannelPage || ap.Decision != checkpoint.DecisionRejected ||
				ap.PayloadSHA256 != no.Wait.PayloadSHA256 || string(ap.Payload) != string(no.Wait.Payload) || ap.Reason != "duplicate claim" {
				t.Fatalf("rejection recorded %+v", failed.Approvals)
			}
			var audit []checkpoint.AuditEntry
			for _, e := range failed.Audit {
				if e.Kind == checkpoint.AuditDecision {
					audit = append(audit, e)
				}
			}
			if len(audit) != 1 || audit[0].By != "dee" || audit[0].Channel != client.ChannelPage || audit[0].Group != "adjusters" {
				t.Fatalf("audit %+v", failed.Audit)
			}
		})
	}
}

func TestListShowsOnlyTheCallersGroups(t *testing.T) {
	var maxList int
	h := newHarness(t, "redis", nil)
	h.park("adj-1", "", "adjusters")
	h.park("clm-1", "", "claims")
	h.park("adj-2", "", "adjusters")
	h.park("sup-1", "", "supervisors")

	list := func(token string) approver.List {
		t.Helper()
		status, _, body := h.do(http.MethodGet, "/api/approvals", token, "", nil)
		if status != 200 {
			t.Fatalf("list: %d %s", status, body)
		}
		var l approver.List
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	ids := func(l approver.List) string {
		var out []string
		for _, a := range l.Approvals {
			if len(a.PayloadSHA256) != 64 || !json.Valid(a.Payload) || a.Group == "" || a.Step != 1 {
				t.Errorf("approval %+v", a)
			}
			out = append(out, a.RunID)
		}
		return strings.Join(out, ",")
	}
	if got := ids(list(h.tokens["ana"])); got != "adj-1,adj-2" {
		t.Errorf("ana sees %q, want adj-1,adj-2 (oldest first)", got)
	}
	if got := ids(list(h.tokens["cy"])); got != "clm-1" {
		t.Errorf("cy sees %q", got)
	}
	if got := ids(list(h.tokens["dee"])); got != "adj-1,clm-1,adj-2" {
		t.Errorf("dee sees %q", got)
	}
	if status, _, _ := h.do(http.MethodGet, "/api/approvals", "", "", nil); status != 401 {
		t.Errorf("list without a token: %d", status)
	}
	status, _, body := h.do(http.MethodGet, "/api/approvals/clm-1", h.tokens["ana"], "", nil)
	if status != 403 || errorBody(t, body).Code != approver.CodeForbidden || strings.Contains(string(body), "amount") {
		t.Errorf("GET outside the groups: %d %s", status, body)
	}
	status, _, body = h.do(http.MethodGet, "/api/approvals/nope", h.tokens["ana"], "", nil)
	if status != 404 || errorBody(t, body).Code != approver.CodeNotFound {
		t.Errorf("GET unknown: %d %s", status, body)
	}

	// MaxList keeps the oldest.
	maxList = 1
	srv, err := approver.New(approver.Config{Client: h.client, Tokens: mustTokens(t, h), MaxList: maxList})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(srv.Handler(), http.MethodGet, "/api/approvals", h.tokens["dee"])
	var l approver.List
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || rec.Code != 200 {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	if ids(l) != "adj-1" || !l.Truncated {
		t.Errorf("MaxList 1: %+v", l)
	}
}

func TestInboxPage(t *testing.T) {
	h := newHarness(t, "redis", nil)
	status, hdr, body := h.do(http.MethodGet, "/", "", "", nil)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", status, hdr.Get("Content-Type"))
	}
	page := string(body)
	for _, want := range []string{
		`id="token"`, `id="save-token"`, `id="status"`, `id="approvals"`, `id="empty"`,
		`"approval"`, `"approve"`, `"reject"`, `"reason"`, `"payload"`, `"hash"`, `"deadline"`,
		`dataset.run`, `sessionStorage`, `/api/approvals`, `"X-Durable-Channel": "page"`, `payload_sha256: item.dataset.sha`, `2000`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, banned := range []string{"innerHTML", "http://", "https://", "<link", "src="} {
		if strings.Contains(page, banned) {
			t.Errorf("page uses %s (self-contained, payloads as text only)", banned)
		}
	}
	csp := hdr.Get("Content-Security-Policy")
	script := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindStringSubmatch(page)
	if script == nil {
		t.Fatal("no inline script")
	}
	sum := sha256.Sum256([]byte(script[1]))
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q does not pin the page's script", csp)
	}
	if hdr.Get("X-Frame-Options") != "DENY" || hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v", hdr)
	}
	if status, _, _ := h.do(http.MethodGet, "/healthz", "", "", nil); status != 200 {
		t.Errorf("healthz %d", status)
	}
	if status, _, body := h.do(http.MethodGet, "/readyz", "", "", nil); status != 200 {
		t.Errorf("readyz %d %s", status, body)
	}
	status, _, body = h.do(http.MethodGet, "/api/nothing", "", "", nil)
	if status != 404 || errorBody(t, body).Code != approver.CodeNotFound {
		t.Errorf("unknown API path: %d %s", status, body)
	}
	status, hdr, body = h.do(http.MethodPost, "/api/approvals", h.tokens["ana"], "{}", nil)
	if status != 405 || hdr.Get("Allow") != "GET" || errorBody(t, body).Code != approver.CodeMethodNotAllowed {
		t.Errorf("POST on the list: %d %s", status, body)
	}
}

// Serve runs the API and the events until its context ends.
func TestServeStopsWithItsContext(t *testing.T) {
	h := newHarness(t, "redis", nil)
	srv, err := approver.New(approver.Config{Client: h.client, Tokens: mustTokens(t, h), NATS: h.nc, EventSecrets: eventSystems})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("still listening after Serve returned")
	}
}

func TestNewValidatesConfig(t *testing.T) {
	h := newHarness(t, "redis", nil)
	set := mustTokens(t, h)
	for name, cfg := range map[string]approver.Config{
		"no client":              {Tokens: set},
		"no tokens":              {Client: h.client},
		"negative body":          {Client: h.client, Tokens: set, MaxBody: -1},
		"events without NATS":    {Client: h.client, Tokens: set, EventSecrets: eventSystems},
		"short secret":           {Client: h.client, Tokens: set, NATS: h.nc, EventSecrets: map[string]approver.EventSystem{"erp": {Secret: "short", Groups: []string{"adjusters"}}}},
		"system without groups":  {Client: h.client, Tokens: set, NATS: h.nc, EventSecrets: map[string]approver.EventSystem{"erp": {Secret: strings.Repeat("s", 32)}}},
		"system that is no name": {Client: h.client, Tokens: set, NATS: h.nc, EventSecrets: map[string]approver.EventSystem{"erp.x": {Secret: strings.Repeat("s", 32), Groups: []string{"adjusters"}}}},
		"trace URL without id":   {Client: h.client, Tokens: set, TraceURL: "http://jaeger:16686/trace/"},
		"trace URL not http":     {Client: h.client, Tokens: set, TraceURL: "javascript:alert({trace_id})"},
	} {
		if _, err := approver.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}
