package approver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// fuzzNow is the approver's clock in the event fuzz target: seeds carry ts
// values around it.
var fuzzNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

var fuzzSystems = map[string]EventSystem{
	"erp": {Secret: "erp-secret-0123456789", Groups: []string{"adjusters"}},
	"crm": {Secret: "crm-secret-0123456789", Groups: []string{"claims", "adjusters"}},
}

// How FuzzAdmitEvent signs the body, so that the fuzzer reaches the JSON
// and the checks behind the signature.
const (
	signRight   = iota // the system's secret over exactly the body
	signAsGiven        // the sig argument as it is
	signWrong          // another secret
)

// FuzzAdmitEvent: no approval event panics the approver, and one admitted
// (every check before the store) is from a known system, signed over
// exactly these bytes, well formed, within the window, and admitted once.
func FuzzAdmitEvent(f *testing.F) {
	hash := strings.Repeat("ab", 32)
	good := func(system, ts string) []byte {
		return []byte(`{"id":"evt-1","system":"` + system + `","run_id":"claim-0042","step":3,"payload_sha256":"` + hash +
			`","decision":"approved","by":"olga","reason":"ok in ERP","ts":"` + ts + `"}`)
	}
	f.Add("erp", uint8(signRight), "", good("erp", "2026-06-01T11:59:00Z"))
	f.Add("crm", uint8(signRight), "", []byte(`{"id":"x","system":"crm","run_id":"r_1","step":1,"payload_sha256":"`+hash+
		`","decision":"rejected","by":"max","ts":"2026-06-01T12:00:30+00:00"}`))
	f.Add("erp", uint8(signRight), "", good("erp", "2026-06-01T11:00:00Z")) // stale
	f.Add("erp", uint8(signRight), "", good("erp", "2026-06-01T12:05:00Z")) // future
	f.Add("erp", uint8(signRight), "", good("crm", "2026-06-01T12:00:00Z")) // other system in the body
	f.Add("sap", uint8(signRight), "", good("sap", "2026-06-01T12:00:00Z")) // unknown system
	f.Add("erp", uint8(signWrong), "", good("erp", "2026-06-01T12:00:00Z")) // wrong secret
	f.Add("erp", uint8(signAsGiven), "sha256=zz", good("erp", "2026-06-01T12:00:00Z"))
	f.Add("erp", uint8(signAsGiven), Sign("erp-secret-0123456789", []byte(`{}`)), []byte(`{}`))
	f.Add("erp", uint8(signRight), "", []byte(`{"ID":"a","SYSTEM":"erp","Run_Id":"r","step":1,"payload_sha256":"`+hash+
		`","decision":"approved","by":" olga ","ts":"2026-06-01T12:00:00Z","id":"b"}`))
	f.Add("erp", uint8(signRight), "", []byte(`{"id":"a","system":"erp","run_id":"a.b","step":1,"payload_sha256":"`+strings.ToUpper(hash)+
		`","decision":"approved","by":"o\u0000","ts":"2026-06-01T12:00:00Z"}`))
	f.Add("erp", uint8(signRight), "", []byte(`{"step":1e400,"ts":"not a time"}`))
	f.Add("erp", uint8(signRight), "", []byte(`null`))
	f.Add("erp", uint8(signRight), "", []byte{0xff, 0xfe, '{'})
	f.Fuzz(func(t *testing.T, system string, mode uint8, sig string, body []byte) {
		switch mode % 3 {
		case signRight:
			secret := "unknown-system-secret"
			if sys, ok := fuzzSystems[system]; ok {
				secret = sys.Secret
			}
			sig = Sign(secret, body)
		case signWrong:
			sig = Sign("not-the-secret-of-anyone", body)
		}
		s := &Server{cfg: Config{EventSecrets: fuzzSystems}, events: newEventState(DefaultEventWindow)}
		ev, key, reason, detail := s.admitEvent(system, sig, body, fuzzNow)
		if reason != "" {
			switch reason {
			case RejectUnknownSystem, RejectBadSignature, RejectMalformed, RejectSystemMismatch, RejectStale, RejectFuture:
			default:
				t.Fatalf("reason %q before the store", reason)
			}
			if detail == "" || key != "" {
				t.Fatalf("rejected %s with detail %q, key %q", reason, detail, key)
			}
			if _, known := fuzzSystems[system]; known && mode%3 == signRight && (reason == RejectUnknownSystem || reason == RejectBadSignature) {
				t.Fatalf("rightly signed event for %s refused as %s", system, reason)
			}
			return
		}

		sys, ok := fuzzSystems[system]
		if !ok {
			t.Fatalf("admitted an event of unknown system %q", system)
		}
		mac := hmac.New(sha256.New, []byte(sys.Secret))
		mac.Write(body)
		got, err := hex.DecodeString(strings.TrimPrefix(sig, "sha256="))
		if !strings.HasPrefix(sig, "sha256=") || err != nil || !hmac.Equal(got, mac.Sum(nil)) {
			t.Fatalf("admitted body %q under signature %q, not %s's HMAC of it", body, sig, system)
		}
		var again Event
		if err := json.Unmarshal(body, &again); err != nil || !reflect.DeepEqual(again, ev) {
			t.Fatalf("admitted %+v, but the body decodes to %+v (%v)", ev, again, err)
		}
		switch {
		case ev.ID == "" || len(ev.ID) > 200:
			t.Fatalf("admitted id %q", ev.ID)
		case ev.System != system:
			t.Fatalf("admitted body of system %q on subject %q", ev.System, system)
		case queue.ValidateRunID(ev.RunID) != nil:
			t.Fatalf("admitted run id %q", ev.RunID)
		case ev.Step < 1:
			t.Fatalf("admitted step %d", ev.Step)
		case !sha256RE.MatchString(ev.PayloadSHA256):
			t.Fatalf("admitted payload_sha256 %q", ev.PayloadSHA256)
		case ev.Decision != checkpoint.DecisionApproved && ev.Decision != checkpoint.DecisionRejected:
			t.Fatalf("admitted decision %q", ev.Decision)
		case strings.TrimSpace(ev.By) == "" || len(ev.By) > 128 || strings.ContainsFunc(ev.By, isControl):
			t.Fatalf("admitted by %q", ev.By)
		case ev.TS.Before(fuzzNow.Add(-DefaultEventWindow)) || ev.TS.After(fuzzNow.Add(maxFuture)):
			t.Fatalf("admitted ts %s, now %s", ev.TS, fuzzNow)
		case key != system+"\x00"+ev.ID:
			t.Fatalf("replay key %q for %s/%s", key, system, ev.ID)
		}
		if _, _, r, _ := s.admitEvent(system, sig, body, fuzzNow.Add(time.Second)); r != RejectReplayed {
			t.Fatalf("the same event again: %q, want %s", r, RejectReplayed)
		}
		tampered := slices.Clone(body)
		tampered[len(tampered)-1] ^= 1
		if _, _, r, _ := s.admitEvent(system, sig, tampered, fuzzNow); r != RejectBadSignature {
			t.Fatalf("body changed after signing: %q, want %s", r, RejectBadSignature)
		}
	})
}

// FuzzLoadEventSecrets: no secrets file panics the loader, and every
// system it loads can be a subject token, has a real secret and groups.
func FuzzLoadEventSecrets(f *testing.F) {
	f.Add([]byte(`{"erp": {"secret": "0123456789abcdef0123", "groups": ["adjusters"]}}`))
	f.Add([]byte(`{"erp": {"secret": "0123456789abcdef0123", "groups": ["adjusters", "claims"]}, "crm_2": {"secret": "fedcba9876543210fedc", "groups": ["claims"]}}`))
	f.Add([]byte(`{"erp": {"secret": "short", "groups": ["adjusters"]}}`))
	f.Add([]byte(`{"erp": {"secret": "0123456789abcdef0123", "groups": [" "]}}`))
	f.Add([]byte(`{"erp": {"secret": "0123456789abcdef0123", "groups": []}}`))
	f.Add([]byte(`{"a.b": {"secret": "0123456789abcdef0123", "groups": ["g"]}}`))
	f.Add([]byte(`{"erp": {"secret": "0123456789abcdef0123", "groups": ["g"], "extra": 1}}`))
	f.Add([]byte(`{"erp": {"SECRET": "0123456789abcdef0123", "Groups": ["g"]}} {"x": {}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "event-secrets.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := LoadEventSecrets(path)
		if err != nil {
			if m != nil {
				t.Fatalf("error %v with systems %v", err, m)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("loaded %d systems from a file that is not one JSON value: %q", len(m), data)
		}
		for name, sys := range m {
			if !systemRE.MatchString(name) || len(sys.Secret) < 16 || len(sys.Groups) == 0 || slicesContainsEmpty(sys.Groups) {
				t.Fatalf("loaded system %q: %+v", name, sys)
			}
			if strings.ContainsAny(name, ".*> \t") {
				t.Fatalf("system %q cannot be one subject token", name)
			}
		}
	})
}
