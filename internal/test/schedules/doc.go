// Package schedules tests schedules (pkg/schedule) as an operator runs
// them: processes of the reference binary on the wall clock, no clock
// moved by the test.
//
// TestSchedulesEveryMinute (DURABLE_SCHEDULES=1, `make schedules`) runs,
// on each store at once, a nats-server (and redis-server) process, one
// `durable worker` and two `durable scheduler` processes, creates four
// schedules firing every minute with `durable schedule create`, SIGKILLs
// a scheduler after the second fire and starts it again after the
// fourth, pauses them after the fifth, and checks through `durable runs
// list` that each fire started one run whose id is the fire's, under
// each overlap policy. It takes about seven minutes, so `go test ./...`
// skips it.
package schedules
