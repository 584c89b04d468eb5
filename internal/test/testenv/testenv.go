// Package testenv starts the real servers tests run against, each on its
// own ports on 127.0.0.1 with its data in a temp dir, stopped at cleanup:
// redis-server (StartRedisServer, with TLS, ACL, cluster mode, the AOF or
// a config file through its options) and nats-server with JetStream
// (StartNATSServer: a process of the binary built from the module, or
// embedded in the test; StartNATSCluster for a JetStream cluster). A
// missing redis-server fails the test loudly.
//
// The processes are run by package proc, which takes no testing.TB and
// also backs `durable bench`; package fleetcheck checks what a fleet of
// them did.
package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Eventually polls cond every 10ms until it returns true or timeout passes.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitWorkflows waits until the store holds a registration of every
// workflow of names: a worker registers its workflows one by one, so a
// test that starts a run as soon as any is registered races the rest.
func WaitWorkflows(tb testing.TB, store checkpoint.Registry, timeout time.Duration, names ...string) {
	tb.Helper()
	Eventually(tb, timeout, fmt.Sprintf("workflows %v registered", names), func() bool {
		infos, err := store.Workflows(context.Background())
		if err != nil {
			return false
		}
		have := map[string]bool{}
		for _, info := range infos {
			have[info.Name] = true
		}
		for _, n := range names {
			if !have[n] {
				return false
			}
		}
		return true
	})
}
