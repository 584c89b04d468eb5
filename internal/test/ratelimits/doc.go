// Package ratelimits tests the fleet-wide rate limits (pkg/flow wired
// into the worker: worker.Config.Flow, steps.Resource) as issue 27's
// acceptance states them, against a fake model provider on loopback that
// speaks Anthropic's Messages API and counts the requests it gets, by
// time.
//
// TestRateLimitShort (in `go test ./...`) runs three in-process workers
// for a few seconds and checks the properties loosely. TestRateLimitFleet
// (DURABLE_RATELIMITS=1, `make ratelimits`) runs, on each store, three
// worker processes (askworker) for 30 s at 10/s burst 5 and checks the
// observed rate within 10 %, then has the provider answer 429 with
// Retry-After: 2 twice and checks that the fleet made no call for 2 s
// after each, with fewer 429s than workers per slow-down.
package ratelimits
