package redisstore_test

import (
	"context"
	"log"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/redis/go-redis/v9"
)

// Needs a running Redis, so it is compiled but not run.
func ExampleNew() {
	ctx := context.Background()
	opts, err := redis.ParseURL("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(opts) // or redis.NewClusterClient: all of a run's keys share a slot
	defer client.Close()

	store := redisstore.New(client, redisstore.Options{Prefix: "durable"})
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
