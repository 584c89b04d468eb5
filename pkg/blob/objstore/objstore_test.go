package objstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/blobtest"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

// nats.go v1.55 jetstream: the reconnect watcher of an async publisher (the
// Object Store puts with PublishAsync) can start on a nil status channel and
// then blocks forever; upstream, not ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}

var buckets atomic.Int64

func uniqueBucket() string { return fmt.Sprintf("blobs%d", buckets.Add(1)) }

func connect(t testing.TB) jetstream.JetStream {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs an embedded nats-server")
	}
	_, js := testenv.StartNATS(t).Connect(t)
	return js
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	js := connect(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := objstore.New(testCtx(t), js, objstore.Options{Bucket: uniqueBucket()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewCreatesOrBindsTheBucket(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	s, err := objstore.New(ctx, js, objstore.Options{Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	if s.Bucket() != objstore.DefaultBucket {
		t.Fatalf("bucket %s", s.Bucket())
	}
	st, err := js.Stream(ctx, "OBJ_"+objstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Storage != jetstream.MemoryStorage || cfg.Replicas != 1 {
		t.Fatalf("stream config: storage %v replicas %d", cfg.Storage, cfg.Replicas)
	}
	// A second process binds the same bucket and sees the same blobs.
	ref, err := s.Put(ctx, "r/1/doc/x", []byte("doc"))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := objstore.New(ctx, js, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := blobtest.ReadAll(t, ctx, s2, ref); err != nil || string(got) != "doc" {
		t.Fatalf("read through a second store: %q %v", got, err)
	}
}

// Delete leaves no metadata behind: a bucket swept by retention does not
// grow by a delete marker per blob.
func TestDeletePurgesMetadata(t *testing.T) {
	js := connect(t)
	ctx := testCtx(t)
	bucket := uniqueBucket()
	s, err := objstore.New(ctx, js, objstore.Options{Bucket: bucket})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Put(ctx, fmt.Sprintf("r/%d/doc/x", i), blobtest.Data(200<<10, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := s.Delete(ctx, fmt.Sprintf("r/%d/doc/x", i)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Fatalf("stream keeps %d messages (%d bytes) after every blob was deleted", info.State.Msgs, info.State.Bytes)
	}
}
