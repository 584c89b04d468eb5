package redisstore

import (
	"fmt"
	"unsafe"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Documents are encoded and decoded with github.com/go-json-experiment/json/v1:
// encoding/json's semantics and output, byte for byte, on the v2 engine
// (what encoding/json runs on under GOEXPERIMENT=jsonv2), two to three
// times faster for the run record and the checkpoint that every commit
// encodes and every sweep decodes.

// marshal encodes v as the string the store writes. The bytes
// json.Marshal returns are this call's alone and never written again, so
// the string is made over them instead of copying them: every commit
// encodes the run and the checkpoint, and the copies were a fifth of a
// worker's allocated bytes per step.
func marshal(v any) (string, error) {
	b, err := jsonv1.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

func unmarshal(s string, v any) error {
	if err := jsonv1.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}
