package redisstore

import (
	"encoding/json"
	"fmt"
	"unsafe"
)

// marshal encodes v as the string the store writes. The bytes
// json.Marshal returns are this call's alone and never written again, so
// the string is made over them instead of copying them: every commit
// encodes the run and the checkpoint, and the copies were a fifth of a
// worker's allocated bytes per step.
func marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

func unmarshal(s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}
