package approver

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzReadDecision: no body of POST /api/approvals/{run}/approve|reject
// panics the approver; each is refused with 400 or 413 and a message, or
// decodes to a decision naming a well-formed payload hash.
func FuzzReadDecision(f *testing.F) {
	hash := strings.Repeat("ab", 32)
	f.Add([]byte(`{"payload_sha256":"`+hash+`"}`), false)
	f.Add([]byte(`{"payload_sha256":" `+strings.ToUpper(hash)+` ","reason":"  looks right  ","step":3}`), true)
	f.Add([]byte(`{"payload_sha256":"`+hash+`","step":-1}`), false)
	f.Add([]byte(`{"payload_sha256":"`+hash+`","approve":true}`), false)
	f.Add([]byte(`{"payload_sha256":"`+hash+`"} {}`), false)
	f.Add([]byte(`{"payload_sha256":"`+hash+`","reason":"`+strings.Repeat("x", 600)+`"}`), true)
	f.Add([]byte(`{"payload_sha256":"`+hash[:63]+`"}`), false)
	f.Add([]byte(`{"payload_sha256":""}`), false)
	f.Add([]byte(`{"step":1e400}`), false)
	f.Add([]byte(`[]`), false)
	f.Add([]byte("  \n\t"), true)
	f.Add([]byte{0xff, '{'}, false)
	const maxBody = 512 // small, so the fuzzer reaches the 413s too
	s := &Server{cfg: Config{MaxBody: maxBody}}
	f.Fuzz(func(t *testing.T, body []byte, chunked bool) {
		r := httptest.NewRequest(http.MethodPost, "/api/approvals/claim-0042/approve", bytes.NewReader(body))
		if chunked {
			r.ContentLength = -1 // no length up front: only the MaxBytesReader stops it
		}
		w := httptest.NewRecorder()
		req, status, msg := s.readDecision(w, r)
		switch status {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if msg == "" {
				t.Fatalf("status %d without a message", status)
			}
			if status == http.StatusRequestEntityTooLarge && len(body) <= maxBody {
				t.Fatalf("%d-byte body refused as too large", len(body))
			}
			return
		case 0:
		default:
			t.Fatalf("status %d (%s), want 0, 400 or 413", status, msg)
		}
		if len(body) > maxBody {
			t.Fatalf("accepted a %d-byte body over MaxBody %d", len(body), maxBody)
		}
		if !sha256RE.MatchString(req.PayloadSHA256) || req.Step < 0 || req.Reason != strings.TrimSpace(req.Reason) {
			t.Fatalf("accepted %+v", req)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not one JSON value: %q", body)
		}
		var again DecisionRequest
		if err := json.Unmarshal(body, &again); err != nil ||
			strings.ToLower(strings.TrimSpace(again.PayloadSHA256)) != req.PayloadSHA256 || again.Step != req.Step ||
			strings.TrimSpace(again.Reason) != req.Reason {
			t.Fatalf("accepted %+v, but the body decodes to %+v (%v)", req, again, err)
		}
	})
}
