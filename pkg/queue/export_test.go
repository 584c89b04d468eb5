package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/queue"
)

// Streams must be what Provision creates: the exported JSON files are
// generated from it, and a stream added to Provision only would be
// missing from them.
func TestStreamsAreWhatProvisionCreates(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: embedded nats-server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := testenv.StartNATS(t).Connect(t)
	if err := queue.Provision(ctx, js, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	var created []string
	for name := range js.StreamNames(ctx).Name() {
		created = append(created, name)
	}
	var declared []string
	for _, sc := range queue.Streams(queue.Config{}) {
		declared = append(declared, sc.Name)
		st, err := js.Stream(ctx, sc.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", sc.Name, err)
		}
		if got := st.CachedInfo().Config; !slices.Equal(got.Subjects, sc.Subjects) || got.MaxAge != sc.MaxAge || got.Duplicates != sc.Duplicates {
			t.Errorf("stream %s: Provision made subjects %v, max age %s, duplicates %s; Streams says %v, %s, %s",
				sc.Name, got.Subjects, got.MaxAge, got.Duplicates, sc.Subjects, sc.MaxAge, sc.Duplicates)
		}
	}
	slices.Sort(created)
	slices.Sort(declared)
	if !slices.Equal(created, declared) {
		t.Fatalf("Provision created %v, Streams declares %v", created, declared)
	}
}

// ConfigJSON's output decodes strictly back into the same configuration:
// every field it writes is one the API type knows.
func TestConfigJSONRoundTrips(t *testing.T) {
	for _, sc := range queue.Streams(queue.Config{Replicas: 3}) {
		b, err := queue.ConfigJSON(sc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasSuffix(b, []byte("}\n")) || !bytes.Contains(b, []byte(`"num_replicas": 3`)) {
			t.Errorf("%s: unexpected rendering:\n%s", sc.Name, b)
		}
		if bytes.Contains(b, []byte(`\u003e`)) {
			t.Errorf("%s: '>' escaped in %s", sc.Name, b)
		}
		var back jetstream.StreamConfig
		strictDecode(t, b, &back)
		if !reflect.DeepEqual(back, sc) {
			t.Errorf("%s: round trip changed the config:\n got %+v\nwant %+v", sc.Name, back, sc)
		}
	}
	cc := queue.ConsumerConfig("claim", 30*time.Second, 0)
	b, err := queue.ConfigJSON(cc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"ack_wait": 30000000000`) {
		t.Errorf("ack_wait not in nanoseconds:\n%s", b)
	}
	var back jetstream.ConsumerConfig
	strictDecode(t, b, &back)
	if !reflect.DeepEqual(back, cc) {
		t.Errorf("consumer round trip changed the config:\n got %+v\nwant %+v", back, cc)
	}
}

func strictDecode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
