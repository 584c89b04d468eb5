package kvstore_test

import (
	"context"
	"log"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Needs a running nats-server with JetStream, so it is compiled but not run.
func ExampleNew() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	store, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "durable"})
	if err != nil {
		log.Fatal(err)
	}
	run, err := store.CreateRun(ctx, checkpoint.Run{
		ID: "claim-0042", Workflow: "claim", Version: 1,
		Status: checkpoint.StatusRunning, Step: 1, StepName: "intake",
	})
	if err != nil {
		log.Fatal(err)
	}
	next := run
	next.Step, next.StepName = 2, "assess"
	run, err = store.Commit(ctx, next, checkpoint.Checkpoint{Step: 1, Name: "intake", State: []byte(`{"amount":1840}`)})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("run %s at step %d, rev %d", run.ID, run.Step, run.Rev)
}
