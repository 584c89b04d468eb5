// Package kvstore is the JetStream KV checkpoint.Store, the default when no
// Redis is configured (`durable dev` runs on it with an embedded server).
//
// A run, each checkpoint, and each step's call journal and failures are KV
// keys; a run's revision is its key's KV revision. Commit writes the
// checkpoint and the run in one JetStream atomic batch (nats-server 2.12 or
// later), with the checkpoint expected absent and the run expected at the
// caller's revision, so both land or neither does. New turns on atomic
// publish on the bucket's stream. Checkpoint keys are never deleted or
// expired: a KV create succeeds over a delete marker, which would let a
// replay commit a step twice.
//
//	nc, err := nats.Connect(os.Getenv("DURABLE_NATS_URL"))
//	if err != nil {
//		return err
//	}
//	defer nc.Close()
//	js, err := jetstream.New(nc)
//	if err != nil {
//		return err
//	}
//	store, err := kvstore.New(ctx, js, kvstore.Options{Bucket: "durable", Replicas: 3})
//	if err != nil {
//		return err
//	}
//	run, err := store.CreateRun(ctx, checkpoint.Run{ID: "claim-0042", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1})
package kvstore
