package queue

import (
	"bytes"
	"encoding/json"

	"github.com/nats-io/nats.go/jetstream"
)

// Streams are the configurations of the streams Provision creates, in the
// order it creates them. deploy/nats/streams holds them as JSON at R3 for
// operators who create the streams themselves (`nats stream add --config`).
func Streams(c Config) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{StepStreamConfig(c), DLQStreamConfig(c), EventStreamConfig(c)}
}

// ConfigJSON renders a stream or consumer configuration as the JSON the
// JetStream API takes, which is also what `nats stream add --config FILE`
// and `nats consumer add STREAM --config FILE` read: indented, with '<'
// and '>' left as they are (subjects are full of them), and a final
// newline. Durations are nanoseconds, as the API wants them.
func ConfigJSON[T jetstream.StreamConfig | jetstream.ConsumerConfig](cfg T) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(cfg); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
