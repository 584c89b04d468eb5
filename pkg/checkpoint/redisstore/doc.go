// Package redisstore is the Redis checkpoint.Store, the fleet default.
//
// Every key of a run carries the hash tag {runID}, and every write to a run
// is one Lua script over that run's keys only, so the store works unchanged
// on Redis Cluster: a commit (checkpoint first-writer-wins plus the run's
// compare-and-set) is atomic on one slot. The three global keys, the run
// index, the workflow registry and the deadline index, are written in
// separate calls; CreateRun repairs the run index, ListRuns skips entries
// whose run is gone, and the scheduler repairs the deadline index from the
// run records.
//
// The run hash lists the run's fan-outs (field fo), so that a purge, the
// retention's cost on Redis, names every key of the run, its branches'
// too, without reading its checkpoints.
//
// Run Redis with AOF (appendonly yes): a checkpoint is only as durable as
// the server's fsync policy.
//
//	opts, err := redis.ParseURL(os.Getenv("DURABLE_REDIS_URL"))
//	if err != nil {
//		return err
//	}
//	client := redis.NewClient(opts)
//	defer client.Close()
//	store := redisstore.New(client, redisstore.Options{Prefix: "durable"})
//	run, err := store.CreateRun(ctx, checkpoint.Run{ID: "claim-0042", Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1})
package redisstore
