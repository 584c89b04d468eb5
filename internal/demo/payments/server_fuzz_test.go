package payments

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
)

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// FuzzParsePayRequest: no POST / body panics the provider; an accepted one
// is one JSON object with a positive integer amount, and its canonical
// form is a fixed point: parsing it again gives the same request and the
// same hash, so a retry with the body re-encoded is still a replay.
func FuzzParsePayRequest(f *testing.F) {
	f.Add([]byte(`{"amount": 1840, "currency": "EUR", "run_id": "claim-0042", "claim": "C-42", "payee": "ana"}`))
	f.Add([]byte(` {"payee":"ana","amount":1,"note":{"x":[1,2.5,"<&>"]}} `))
	f.Add([]byte(`{"amount": 9223372036854775807}`))
	f.Add([]byte(`{"amount": 9223372036854775808}`))
	f.Add([]byte(`{"amount": 12345678901234567890123}`))
	f.Add([]byte(`{"amount": 1.5}`))
	f.Add([]byte(`{"amount": 1e3}`))
	f.Add([]byte(`{"amount": -5}`))
	f.Add([]byte(`{"amount": "100"}`))
	f.Add([]byte(`{"amount": 1, "payee": 7}`))
	f.Add([]byte(`{"amount": 1, "amount": 2}`))
	f.Add([]byte(`{"amount": 1} {"amount": 2}`))
	f.Add([]byte(`{"amount": 1, "payee": "\ud800"}`))
	f.Add([]byte("{\"amount\": 1, \"payee\": \"\xff\"}"))
	f.Add([]byte(`[{"amount": 1}]`))
	f.Add([]byte(`null`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, sum, err := parsePayRequest(body)
		if err != nil {
			if sum != "" || err.Error() == "" {
				t.Fatalf("refused with hash %q, error %q", sum, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body that is not one JSON value: %q", body)
		}
		if req.Amount <= 0 || !hexSHA256.MatchString(sum) {
			t.Fatalf("accepted %+v with hash %q", req, sum)
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			t.Fatalf("accepted %q, which is no JSON object: %v", body, err)
		}
		canon, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		req2, sum2, err := parsePayRequest(canon)
		if err != nil || req2 != req || sum2 != sum {
			t.Fatalf("%q accepted as %+v %s, its canonical form %s as %+v %s (%v)", body, req, sum, canon, req2, sum2, err)
		}
	})
}
