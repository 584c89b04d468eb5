// Package fleet runs durable as a fleet on one machine, without
// containers: a JetStream cluster of nats-server processes, a Redis
// Cluster of redis-server processes (primaries and replicas), the demo
// payments API, and worker and scheduler processes of the reference
// binary, all on 127.0.0.1 and stopped at cleanup.
//
// The helpers (Start, StartNATSCluster, StartRedisCluster) serve the tests
// of this package and other packages' tests that need a cluster. Every
// server and service is started through internal/test/testenv and supervised
// by its package proc; what the fleet did is checked by
// internal/test/testenv/fleetcheck, as the chaos suite's is.
//
//   - TestFleet (DURABLE_FLEET=1, `make fleet`) runs claims and agent runs
//     while it SIGKILLs a NATS node, fails over a Redis primary and
//     SIGKILLs a worker that is waiting for a payment's answer, then
//     checks that every run completed and paid once, and prints a summary.
//   - TestFleetScale (DURABLE_FLEET_SCALE=1) measures throughput with 1, 2
//     and 4 worker processes, on the cluster and on single servers.
//
// Both skip without their variable, so `go test ./...` stays quick. See
// docs/fleet.md.
package fleet
