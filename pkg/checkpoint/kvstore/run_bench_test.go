package kvstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
)

// BenchmarkRun measures the store's part of whole runs as `durable bench`
// drives them on KV (a one-replica file bucket): CreateRun, then nine
// steps (Load and Commit), the last one completing the run, on many runs
// at once. One op is one step; a run's create is spread over its steps.
// It holds what the run index adds to a run's life (its entries at the
// create and at the status change) against a step that keeps the status.
func BenchmarkRun(b *testing.B) {
	js := connect(b)
	s, err := kvstore.New(b.Context(), js, kvstore.Options{Bucket: uniqueBucket()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	state := []byte(`{"run_id":"claim-000000","step":3,"amount":1840,"currency":"EUR","policy_id":"P-1234567","status":"assessed","note":"` +
		"0123456789012345678901234567890123456789012345678901234567890123456789" + `"}`)
	const steps = 9
	var runs atomic.Int64
	before := js.Conn().Stats()
	b.SetParallelism(64) // with GOMAXPROCS 2: 128 steps in flight, as the bench worker
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var run checkpoint.Run
		n := 0
		for pb.Next() {
			if n == 0 || n > steps {
				id := fmt.Sprint("run-", runs.Add(1))
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
			if n == steps {
				next.Status, next.Step, next.StepName = checkpoint.StatusCompleted, n, cp.Name
				cp.Status, cp.Next = checkpoint.StatusCompleted, ""
			}
			if run, err = s.Commit(ctx, next, cp); err != nil {
				b.Fatal(err)
			}
			n++
		}
	})
	after := js.Conn().Stats()
	b.ReportMetric(float64(after.OutMsgs-before.OutMsgs)/float64(b.N), "msgs/op")
}
