// Package worker runs workflow steps from the step stream: the durable step
// protocol of DESIGN.md on a checkpoint store and JetStream. It is
// stateless, so run as many as you like on any host.
//
// Most worker binaries need no more than pkg/workercmd, which gives yours
// every flag, variable and endpoint of `durable worker`. Build on this
// package directly to embed a worker in a program that connects by itself:
//
//	nc, _ := nats.Connect(os.Getenv("DURABLE_NATS_URL"))
//	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(queue.PublishTimeout))
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	w, err := worker.New(worker.Config{
//		JetStream:   js,
//		Store:       redisstore.New(rdb, redisstore.Options{}),
//		Registry:    steps.NewRegistry().MustRegister(myWorkflow()),
//		Concurrency: 32,
//	})
//	if err != nil {
//		log.Fatal(err)
//	}
//	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	_ = w.Run(ctx) // on SIGTERM: stop taking work, drain, release the rest
//
// For each delivery of step n of run R the worker loads the run and its
// checkpoints, runs the step from checkpoint n-1's state, commits
// checkpoint n first-writer-wins with the run record, publishes step n+1
// and acks. A crash between any two of these is repaired by the
// redelivery, which is why replaying any message is harmless. Hooks run at
// the boundaries between these actions (Boundary, Hook).
package worker
