package flow_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The embedded nats-server keeps background goroutines that end
		// shortly after it is shut down.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// t0 is the tests' simulated time: Take and SlowDown are given it, plus
// offsets, never the wall clock.
var t0 = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// newStore opens a store over a new connection to srv, as another
// process would.
func newStore(tb testing.TB, srv *testenv.NATS, opts flow.StoreOptions) (*flow.Store, jetstream.JetStream) {
	tb.Helper()
	_, js := srv.Connect(tb)
	st, err := flow.NewStore(ctxT(tb), js, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return st, js
}

func set(tb testing.TB, st *flow.Store, name string, r flow.Rate) {
	tb.Helper()
	if _, err := st.Set(ctxT(tb), name, r, "test"); err != nil {
		tb.Fatal(err)
	}
}

// revision is the KV revision of name's record; 0 when there is none.
func revision(tb testing.TB, js jetstream.JetStream, name string) uint64 {
	tb.Helper()
	kv, err := js.KeyValue(ctxT(tb), "durable_limits")
	if err != nil {
		tb.Fatal(err)
	}
	e, err := kv.Get(ctxT(tb), "l."+name)
	if err != nil {
		return 0
	}
	return e.Revision()
}

// eventually polls cond until it holds or 10 s pass.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
