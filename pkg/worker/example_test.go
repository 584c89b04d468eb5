package worker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Order is the state of the example workflow.
type Order struct {
	Items int `json:"items"`
	Total int `json:"total"`
}

// A worker on an in-process NATS server with the JetStream KV store (what
// `durable dev` embeds), running a two-step workflow to the end.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "durable-example-")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	ns.Start()
	defer ns.WaitForShutdown()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		fmt.Println("nats-server not ready")
		return
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store, err := kvstore.New(ctx, js, kvstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}

	orders := steps.New[Order]("orders", 1)
	ship := orders.Ref("ship") // registration fails if no step "ship" is added
	orders.Step("price", func(_ context.Context, _ *steps.Context, o Order) (steps.Outcome[Order], error) {
		o.Total = o.Items * 25
		return steps.Next(ship, o), nil
	}).Step("ship", func(_ context.Context, s *steps.Context, o Order) (steps.Outcome[Order], error) {
		fmt.Println("shipping", s.RunID(), "with key", s.IdempotencyKey())
		return steps.Complete(o), nil
	})
	quiet := zerolog.Nop()
	w, err := worker.New(worker.Config{JetStream: js, Store: store, Registry: steps.NewRegistry().MustRegister(orders), Logger: &quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()

	// The client starts the run; the worker registers the workflow as it
	// starts, so the first start may come too early.
	c := client.New(js, store)
	for {
		_, _, err = c.Start(ctx, client.StartRequest{Workflow: "orders", RunID: "order-7", Input: Order{Items: 3}})
		if !errors.Is(err, client.ErrUnknownWorkflow) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		run, err := store.GetRun(ctx, "order-7")
		if err == nil && run.Status.Terminal() {
			cp, _ := store.Checkpoint(ctx, "order-7", run.Step)
			fmt.Println(run.Status, "after step", run.Step, string(cp.State))
			return
		}
		if ctx.Err() != nil {
			fmt.Println("timed out")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Output:
	// shipping order-7 with key order-7:step2
	// completed after step 2 {"items":3,"total":75}
}
