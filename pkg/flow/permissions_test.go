package flow_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/flow"
)

// workerRights are the NATS rights a worker needs for its limits, on the
// default bucket: what deploy/nats/nats-server.conf's WORKER user must
// add for pkg/flow. It creates the bucket when missing (NewStore), reads
// a key (direct get, or STREAM.MSG.GET on a bucket without allow_direct),
// lists the keys (an ordered consumer: CONSUMER.CREATE and .DELETE, flow
// control replies on $JS.FC) and writes keys, TTLs included ($KV).
var workerRights = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.KV_durable_limits", "$JS.API.STREAM.CREATE.KV_durable_limits",
	"$JS.API.DIRECT.GET.KV_durable_limits.>", "$JS.API.STREAM.MSG.GET.KV_durable_limits",
	"$JS.API.CONSUMER.CREATE.KV_durable_limits.>", "$JS.API.CONSUMER.DELETE.KV_durable_limits.>",
	"$JS.FC.KV_durable_limits.>",
	"$KV.durable_limits.>",
}

// A worker with workerRights only, on its own inbox prefix, does all a
// worker does with limits, the bucket's creation included, with no
// permission violation.
func TestWorkerRights(t *testing.T) {
	srv := testenv.StartNATSServer(t, testenv.NATSEmbedded(), testenv.NATSServerOptions(func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "admin", Password: "admin-pw"},
			{Username: "worker", Password: "worker-pw", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: workerRights},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_worker.>"}},
			}},
		}
	}))
	var mu sync.Mutex
	var violations []error
	nc, err := nats.Connect(srv.URL, nats.UserInfo("worker", "worker-pw"), nats.CustomInboxPrefix("_INBOX_worker"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			violations = append(violations, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()

	st, err := flow.NewStore(ctx, js, flow.StoreOptions{}) // creates the bucket
	if err != nil {
		t.Fatal(err)
	}
	lim := flow.NewLimiter(st, flow.LimiterOptions{})
	steps := []struct {
		what string
		do   func() error
	}{
		{"set", func() error {
			_, err := st.Set(ctx, "model", flow.Rate{N: 10, Per: time.Second, Burst: 5}, "worker")
			return err
		}},
		{"take (a refresh, a read and a write)", func() error { _, err := lim.Take(ctx, "model", t0); return err }},
		{"take of a name with no limit", func() error { _, err := lim.Take(ctx, "free", t0); return err }},
		{"slow down a limit", func() error { _, err := lim.SlowDownOn(ctx, "model", &tooMany{}, t0); return err }},
		{"slow down a name with no limit (a TTL)", func() error { _, err := lim.SlowDownOn(ctx, "ghost", &tooMany{}, t0); return err }},
		{"extend it (a TTL on a compare-and-set)", func() error { return st.SlowDown(ctx, "ghost", at(time.Minute)) }},
		{"list", func() error { _, err := st.List(ctx); return err }},
		{"delete", func() error { return st.Delete(ctx, "model") }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Errorf("%s: %v", s.what, err)
		}
	}
	if wait, err := st.Take(ctx, "ghost", at(ms(500))); wait != time.Minute-ms(500) || err != nil {
		t.Errorf("take of the name slowed down: %s, %v", wait, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range violations {
		t.Errorf("asynchronous error (a permission violation?): %v", err)
	}
}
