package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/checkpointtest"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func connect(t testing.TB) jetstream.JetStream {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
	_, js := testenv.StartNATS(t).Connect(t)
	return js
}

var buckets atomic.Int64

// uniqueBucket isolates one store on a shared server.
func uniqueBucket() string { return fmt.Sprintf("t%d", buckets.Add(1)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newStore(t testing.TB, js jetstream.JetStream) (*kvstore.Store, string) {
	t.Helper()
	bucket := uniqueBucket()
	s, err := kvstore.New(testCtx(t), js, kvstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatalf("kvstore.New: %v", err)
	}
	return s, bucket
}

func TestConformance(t *testing.T) {
	js := connect(t)
	// On a one-replica file bucket Commit is two writes, checkpoint first
	// (see the package doc); TestConformanceBatches and TestReplicated run
	// the atomic batch.
	checkpointtest.RunWith(t, checkpointtest.Options{CheckpointFirst: true}, func(t *testing.T) checkpoint.Store {
		s, _ := newStore(t, js)
		return s
	})
}

// New binds an existing bucket (another worker created it) and keeps its
// configuration.
func TestNewIsIdempotent(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	bucket := uniqueBucket()
	for range 3 {
		if _, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket}); err != nil {
			t.Fatalf("New: %v", err)
		}
	}
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	if cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 {
		t.Fatalf("stream config: storage %v replicas %d", cfg.Storage, cfg.Replicas)
	}

	// A bucket created by someone else works as it is.
	other := uniqueBucket()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: other}); err != nil {
		t.Fatal(err)
	}
	s, err := kvstore.New(ctx, js, kvstore.Options{Bucket: other})
	if err != nil {
		t.Fatalf("New on an existing bucket: %v", err)
	}
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: "r", Status: checkpoint.StatusRunning, Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, run, checkpoint.Checkpoint{Step: 1}); err != nil {
		t.Fatalf("Commit on an adopted bucket: %v", err)
	}
}

func TestInvalidNames(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, _ := newStore(t, js)
	for _, id := range []string{"", "a.b", "a*", "a>", "a b"} {
		if _, err := s.CreateRun(ctx, checkpoint.Run{ID: id}); err == nil {
			t.Errorf("CreateRun(%q) succeeded", id)
		}
		if _, err := s.GetRun(ctx, id); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("GetRun(%q): %v, want ErrNotFound", id, err)
		}
	}
	if err := s.RegisterWorkflow(ctx, checkpoint.WorkflowInfo{Name: "a.b"}); err == nil {
		t.Error("RegisterWorkflow(a.b) succeeded")
	}
}
