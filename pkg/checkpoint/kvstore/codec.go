package kvstore

import (
	"fmt"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
	jsonv1 "github.com/go-json-experiment/json/v1"
	"github.com/nats-io/nats.go/jetstream"
)

// marshal encodes v with github.com/go-json-experiment/json/v1, as the
// Redis store does: encoding/json's output, faster (redisstore/codec.go).
func marshal(v any) ([]byte, error) {
	b, err := jsonv1.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return b, nil
}

func unmarshal(b []byte, v any) error {
	if err := jsonv1.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}

// decodeRun reads a run entry (run.<R>); the entry's revision is the
// run's Rev. A tombstone is a *checkpoint.PurgedError.
func decodeRun(e jetstream.KeyValueEntry) (checkpoint.Run, error) {
	run, _, err := decodeStored(strings.TrimPrefix(e.Key(), "run."), e.Value(), e.Revision())
	return run, err
}
