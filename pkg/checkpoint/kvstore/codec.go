package kvstore

import (
	"encoding/json"
	"fmt"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/nats-io/nats.go/jetstream"
)

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return b, nil
}

func unmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}

// decodeRun reads a run entry; the entry's revision is the run's Rev.
func decodeRun(e jetstream.KeyValueEntry) (checkpoint.Run, error) {
	return decodeRunValue(e.Value(), e.Revision())
}

func decodeRunValue(value []byte, rev uint64) (checkpoint.Run, error) {
	var run checkpoint.Run
	if err := unmarshal(value, &run); err != nil {
		return checkpoint.Run{}, err
	}
	run.Rev = rev
	return run, nil
}
