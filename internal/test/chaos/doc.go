// Package chaos is durable's chaos suite: a whole fleet as separate
// processes (a nats-server process built from the module, a redis-server
// with appendonly yes and appendfsync always, the approver, two schedulers
// and three workers of the reference binary) runs hundreds of claims and
// agent-loop runs while the suite SIGKILLs and restarts workers, NATS and
// Redis, and freezes a worker with SIGSTOP past its ack wait before letting
// it go on as a zombie. Parked claims are approved through the approver's
// HTTP API as they park. At the end it checks, from the stores, the stream
// and the payments API, that every run completed (or went dead with a
// reason), each claim paid exactly once, checkpoints are contiguous, every
// decision is audited and no step message is left unacked, and prints a
// summary table. The servers and services run under internal/test/testenv's
// supervisor (package proc) and the invariants are checked by
// internal/test/testenv/fleetcheck, as internal/test/fleet's are.
//
// The suite is TestChaos. It runs in its short form by default (it is part
// of `make test` and CI; -short skips it) and in its full form with
// DURABLE_CHAOS=full (`make chaos`). DURABLE_CHAOS_SEED fixes the random
// choices; DURABLE_CHAOS_KEEP=1 keeps the logs and data directory.
package chaos
