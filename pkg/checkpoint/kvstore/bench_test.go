package kvstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkStep measures the store's part of a step as a worker does it:
// Load step n, then Commit it, on many runs at once (an embedded
// nats-server), on a file and a memory bucket, committing in two writes
// and in one atomic batch. Profile it with -cpuprofile to see the client
// and the server together.
func BenchmarkStep(b *testing.B) {
	js := connect(b)
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		for _, batches := range []bool{false, true} {
			name := map[bool]string{false: "two-writes", true: "batch"}[batches]
			b.Run(storage.String()+"/"+name, func(b *testing.B) {
				bucket := uniqueBucket()
				s, err := kvstore.New(b.Context(), js, kvstore.Options{Bucket: bucket, Storage: storage})
				if err != nil {
					b.Fatal(err)
				}
				if batches && !kvstore.Batches(s) {
					// New keeps a one-replica file bucket on two writes.
					allowAtomic(b, js, bucket)
				}
				kvstore.SetBatches(s, batches)
				benchmarkStep(b, s)
			})
		}
	}
}

func allowAtomic(b *testing.B, js jetstream.JetStream, bucket string) {
	st, err := js.Stream(b.Context(), "KV_"+bucket)
	if err != nil {
		b.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(b.Context(), cfg); err != nil {
		b.Fatal(err)
	}
}

func benchmarkStep(b *testing.B, s *kvstore.Store) {
	ctx := b.Context()
	state := []byte(`{"run_id":"claim-000000","step":3,"amount":1840,"currency":"EUR","policy_id":"P-1234567","status":"assessed","note":"` +
		"0123456789012345678901234567890123456789012345678901234567890123456789" + `"}`)
	var runs atomic.Int64
	b.SetParallelism(64) // with GOMAXPROCS 2: 128 steps in flight, as the bench worker
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var run checkpoint.Run
		n := 0
		for pb.Next() {
			if n == 0 || n > 9 {
				id := fmt.Sprint("bench-", runs.Add(1))
				var err error
				run, err = s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "s1", Input: state})
				if err != nil {
					b.Fatal(err)
				}
				n = 1
			}
			snap, err := s.Load(ctx, run.ID, n)
			if err != nil {
				b.Fatal(err)
			}
			next := snap.Run
			next.Step, next.StepName, next.Steps = n+1, fmt.Sprint("s", n+1), snap.Run.Steps+1
			cp := checkpoint.Checkpoint{RunID: run.ID, Step: n, Name: snap.Run.StepName, State: state, Next: next.StepName, Status: checkpoint.StatusRunning, Attempt: 1}
			if run, err = s.Commit(ctx, next, cp); err != nil {
				b.Fatal(err)
			}
			n++
		}
	})
}
