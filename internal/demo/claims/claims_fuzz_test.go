package claims

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzReadAmount: no POST or PUT body panics the claims system, and one
// it accepts sets a positive amount, the one the body names.
func FuzzReadAmount(f *testing.F) {
	f.Add([]byte(`{"amount": 1840}`))
	f.Add([]byte(`{"AMOUNT": 7, "note": "x"}`))
	f.Add([]byte(`{"amount": 9223372036854775807}`))
	f.Add([]byte(`{"amount": 9223372036854775808}`))
	f.Add([]byte(`{"amount": 0}`))
	f.Add([]byte(`{"amount": -1}`))
	f.Add([]byte(`{"amount": 1.5}`))
	f.Add([]byte(`{"amount": "10"}`))
	f.Add([]byte(`{"amount": null}`))
	f.Add([]byte(`{"amount": 3} trailing`))
	f.Add([]byte(`{"pad": "` + strings.Repeat("x", 4100) + `", "amount": 1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		amount, ok := readAmount(bytes.NewReader(body))
		if !ok {
			if amount != 0 {
				t.Fatalf("refused with amount %d", amount)
			}
			return
		}
		if amount <= 0 {
			t.Fatalf("accepted amount %d from %q", amount, body)
		}
		var v struct {
			Amount int64 `json:"amount"`
		}
		if len(body) <= 4096 && json.Valid(body) {
			if err := json.Unmarshal(body, &v); err != nil || v.Amount != amount {
				t.Fatalf("%q accepted as %d, decodes to %d (%v)", body, amount, v.Amount, err)
			}
		}
	})
}
