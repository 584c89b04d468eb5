package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzNormalizeInput: no run input panics Start's check; an accepted one
// was a JSON object (or nothing), is stored as that object compacted, and
// normalizes to itself, so starting the same run twice matches.
func FuzzNormalizeInput(f *testing.F) {
	f.Add([]byte(`{"claim": "claim-0042", "amount": 1840}`))
	f.Add([]byte(" \n{\"a\":[1,2,{\"b\":null}],\"c\":\"\\u00e9\"}\r\n"))
	f.Add([]byte(`{}`))
	f.Add([]byte(``))
	f.Add([]byte(`   `))
	f.Add([]byte(`null`))
	f.Add([]byte(`[1, 2]`))
	f.Add([]byte(`"text"`))
	f.Add([]byte(`{"a":1} {"b":2}`))
	f.Add([]byte(`{"a":1e400}`))
	f.Add([]byte(`{"a":1,"a":2}`))
	f.Add([]byte("{\"a\":\"\xff\"}"))
	f.Add([]byte("\u00a0{}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := normalizeInput(in)
		if err != nil {
			if !errors.Is(err, ErrBadInput) {
				t.Fatalf("error %v is not ErrBadInput", err)
			}
			return
		}
		trimmed := bytes.Trim(in, " \t\r\n")
		if len(trimmed) == 0 {
			if string(out) != `{}` {
				t.Fatalf("empty input stored as %s, want {}", out)
			}
			return
		}
		if !json.Valid(trimmed) || trimmed[0] != '{' {
			t.Fatalf("accepted %q, which is not a JSON object", in)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, trimmed); err != nil || !bytes.Equal(buf.Bytes(), out) {
			t.Fatalf("%q stored as %q, want it compacted (%v)", in, out, err)
		}
		again, err := normalizeInput(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q normalizes to %q, then to %q (%v)", in, out, again, err)
		}
		if !jsonEqual(in, out) {
			t.Fatalf("%q and its normal form %q are not the same input", in, out)
		}
	})
}
