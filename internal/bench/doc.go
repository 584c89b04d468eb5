// Package bench measures durable on the claims-9 workload of WORKLOAD.md
// against the floor, a bare pipeline with no framework, on servers it
// starts itself on loopback: a redis-server (appendonly yes, appendfsync
// everysec) and an embedded nats-server with JetStream file storage.
//
// One system at a time runs in one worker process (this binary again, as
// `durable bench-worker`), so its CPU time and peak RSS are its own. The
// bench process drives it: it starts runs, watches the worker's acks and
// reports throughput (W runs started at once), per-step latency (R runs
// one at a time), worker CPU per 1,000 steps and peak RSS.
//
//	rep, err := bench.Run(ctx, bench.Config{Stores: []string{"redis"}, Runs: 2000})
//	if err != nil { ... }
//	rep.WriteText(os.Stdout)
//
// Last, on the Redis store, the waiting-at-scale phase (Bench.Parked)
// parks N runs of a one-step workflow at an approval through a worker
// process of its own and reports the worker's RSS and goroutines idle and
// with the runs parked, Redis memory per parked run, and the time a
// scheduler, started once the approvals' TTL has passed, takes to expire
// them all, each figure with the bound of issue 5.
//
// `durable bench` is the command; BenchmarkClaims9Redis, BenchmarkClaims9KV
// and BenchmarkFloor run the same code under `go test -bench`.
package bench
