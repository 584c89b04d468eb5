package client_test

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

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Expense is the input and state of the example workflow.
type Expense struct {
	Amount     int    `json:"amount"`
	ApprovedBy string `json:"approved_by,omitempty"`
}

// A run started with a typed input parks for approval; a decision through
// the client resumes it. Starting the same run again starts nothing.
func ExampleClient_Start() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, store, stop, err := embedded(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	stopWorker, err := startWorker(ctx, js, store)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stopWorker()

	c := client.New(js, store)
	req := client.StartRequest{Workflow: "expense", RunID: "exp-1", Input: Expense{Amount: 250}, By: "intake"}
	for {
		_, _, err = c.Start(ctx, req) // the worker registers the workflow as it starts
		if !errors.Is(err, client.ErrUnknownWorkflow) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	run := waitFor(ctx, store, "exp-1", checkpoint.StatusWaiting)
	fmt.Println(run.Status, "for", run.Wait.Group)

	if _, err := c.Decide(ctx, client.Decision{RunID: "exp-1", By: "maria", Channel: client.ChannelAPI}); err != nil {
		fmt.Println(err)
		return
	}
	run = waitFor(ctx, store, "exp-1", checkpoint.StatusCompleted)
	fmt.Println(run.Status, "approved by", run.Approvals[0].By)

	_, created, err := c.Start(ctx, req)
	fmt.Println("started again:", created, err)
	// Output:
	// waiting for managers
	// completed approved by maria
	// started again: false <nil>
}

// expense waits for a manager above 100, then completes.
func expense() *steps.Workflow[Expense] {
	return steps.New[Expense]("expense", 1).
		Step("approve", func(_ context.Context, s *steps.Context, e Expense) (steps.Outcome[Expense], error) {
			req := steps.ApprovalRequest{Payload: e, Group: "managers"}
			d, err := s.Approval(req)
			switch {
			case err != nil:
				return steps.Outcome[Expense]{}, err
			case d == nil:
				return steps.Park[Expense](req), nil
			case !d.Approved():
				return steps.Fail(e, "rejected by "+d.By), nil
			}
			e.ApprovedBy = d.By
			return steps.Complete(e), nil
		})
}

// embedded starts an in-process NATS server and opens the KV store on it.
func embedded(ctx context.Context) (jetstream.JetStream, checkpoint.Store, func(), error) {
	dir, err := os.MkdirTemp("", "durable-example-")
	if err != nil {
		return nil, nil, nil, err
	}
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true})
	if err != nil {
		return nil, nil, nil, err
	}
	ns.Start()
	stop := func() { ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }
	if !ns.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, nil, nil, errors.New("nats-server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	stop = func() { nc.Close(); ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }
	js, _ := jetstream.New(nc)
	store, err := kvstore.New(ctx, js, kvstore.Options{})
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return js, store, stop, nil
}

func startWorker(ctx context.Context, js jetstream.JetStream, store checkpoint.Store) (stop func(), err error) {
	quiet := zerolog.Nop()
	w, err := worker.New(worker.Config{JetStream: js, Store: store, Registry: steps.NewRegistry().MustRegister(expense()), Logger: &quiet})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	return func() { cancel(); <-done }, nil
}

func waitFor(ctx context.Context, store checkpoint.Store, id string, want checkpoint.Status) checkpoint.Run {
	for {
		run, err := store.GetRun(ctx, id)
		if (err == nil && run.Status == want) || ctx.Err() != nil {
			return run
		}
		time.Sleep(20 * time.Millisecond)
	}
}
