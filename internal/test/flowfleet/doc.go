// Package flowfleet tests concurrency limits and fairness (pkg/flow,
// steps.Uses, worker.Config.Flow) with real worker processes on each
// store: nats-server and redis-server processes on 127.0.0.1, worker
// processes of testdata/worker (the workflow "agent", whose turns use
// the resource "model"), and a fake model provider in the test process
// that counts the calls in flight.
//
// TestFlowFleet (DURABLE_FLOWFLEET=1, `make flowfleet`) is issue 27's
// fleet acceptance: the limit holds, every run completes, a SIGKILLed
// worker's slots come back within the lease, waiting workers spend
// little CPU. TestFlowFleetShort is its short form for `go test ./...`.
package flowfleet
