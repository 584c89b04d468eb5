package steps

import (
	"encoding/json"
	"reflect"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// The state of every step is decoded and encoded once per step, so both
// go through github.com/go-json-experiment/json/v1: the standard
// library's v1 semantics and output, byte for byte, on the v2 engine that
// encoding/json itself runs on under GOEXPERIMENT=jsonv2, two to three
// times faster. Its errors are not the standard library's types, which
// callers match (errors.As with *json.SyntaxError), so a failure is
// repeated with encoding/json for the error it returns.

// decodeState decodes data into v, a pointer.
func decodeState(data []byte, v any) error {
	if jsonv1.Unmarshal(data, v) == nil {
		return nil
	}
	reflect.ValueOf(v).Elem().SetZero() // what the failed decode left
	return json.Unmarshal(data, v)
}

// encodeState encodes v.
func encodeState(v any) ([]byte, error) {
	if b, err := jsonv1.Marshal(v); err == nil {
		return b, nil
	}
	return json.Marshal(v)
}
