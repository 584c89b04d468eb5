// Package kvstore is the JetStream KV checkpoint.Store, the default when no
// Redis is configured (`durable dev` runs on it with an embedded server).
//
// A run, each checkpoint, and each step's call journal and failures are KV
// keys; a run's revision is its key's KV revision.
//
// Commit is two ordinary writes, not one transaction: the checkpoint key,
// create-only (the first writer of a step wins, a loser writes nothing and
// gets checkpoint.ErrCheckpointExists), then the run, compare-and-set on
// the caller's revision. A run therefore never moves before its
// checkpoint is stored; a crash between the writes leaves a run that lags
// its checkpoint, which the worker rolls forward when the step is
// delivered again. When the run changed between the caller's read and the
// second write, the checkpoint is stored all the same and is the step's
// result: a run still running at that step is moved onto it (keeping what
// the other writer recorded, such as an audit entry) and Commit succeeds;
// a run already rolled forward onto it makes Commit succeed as well; a run
// that went elsewhere (cancelled, parked, dead) is left alone and Commit
// returns checkpoint.ErrConflict. The run record is the truth: such a
// checkpoint shows in Load and Checkpoints (and `durable runs show`) as
// work done for a step the run did not take. It stays step n's result: if
// the run comes back to step n (a redrive of a dead run, a parked run
// resumed by a decision), the worker finds the step done and rolls the run
// forward onto it instead of running the step again. Strict stores (Redis)
// write nothing on ErrConflict; the conformance suite runs this store with
// checkpointtest.Options{CheckpointFirst: true}.
//
// Load reads the run and, at the same time, the newest of the run's step
// keys (a direct get by wildcard subject): on a step's first attempt
// that one read says checkpoint n-1 is the latest and step n has nothing
// yet. Retries and replays read each key. Workflows, which every run start
// calls, keeps the list and reads it again only when the newest workflow
// key moved.
//
// Checkpoint keys are never deleted while their run exists: a KV create
// succeeds over a delete marker, which would let a replay commit a step
// twice. The one exception is a commit to a run that does not exist (a
// caller bug), whose checkpoint is removed again.
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
