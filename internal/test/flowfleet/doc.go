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
// little CPU. TestFlowFairness (gated alike) is the fairness acceptance:
// tenant a queues 1,000 runs, then tenant b 10; b's finish before 100
// more of a's. TestFlowPerKey (gated alike) is the acceptance of limits
// per key: 5 over all tenants and 2 per tenant, tenant a with 60 runs
// and b, c, d 10 each, a SIGKILL; no tenant ever has more than 2 calls
// in flight, the small tenants are not starved, and the keys' records
// (k.model.*) are gone a lease after the last run. TestFlowFleetShort
// and TestFlowPerKeyShort are the short forms for `go test ./...`.
package flowfleet
