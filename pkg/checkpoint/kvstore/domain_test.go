package kvstore_test

import (
	"testing"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// With a JetStream domain, KV puts go through "$JS.<domain>.API."; the
// commit's batch must take the same route as the KV client's own puts.
func TestCommitThroughDomain(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
	n := testenv.StartNATSServer(t, testenv.NATSEmbedded(), testenv.NATSServerOptions(func(o *server.Options) {
		o.JetStreamDomain = "hub"
	}))
	nc, err := nats.Connect(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	store, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "dom"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	run, err := store.CreateRun(ctx, checkpoint.Run{ID: "d1", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	run.Step = 2
	got, err := store.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, State: []byte(`{}`)})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	stored, err := store.GetRun(ctx, "d1")
	if err != nil || stored.Rev != got.Rev || stored.Step != 2 {
		t.Fatalf("run after commit = %+v, %v; want step 2 at rev %d", stored, err, got.Rev)
	}
}
