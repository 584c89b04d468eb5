package kvstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
				benchmarkStep(b, s, false)
			})
		}
	}
}

// BenchmarkRun measures the store's part of whole runs as `durable bench`
// drives them on KV (a one-replica file bucket, two-write commits):
// CreateRun, then nine steps (Load and Commit), the last one completing
// the run. One op is a step; a run's create and end are spread over its
// steps, and so are the messages its client sends (msgs/op): what the
// run index adds to a run's life beside its steps.
func BenchmarkRun(b *testing.B) {
	js := connect(b)
	s, err := kvstore.New(b.Context(), js, kvstore.Options{Bucket: uniqueBucket()})
	if err != nil {
		b.Fatal(err)
	}
	before := js.Conn().Stats()
	benchmarkStep(b, s, true)
	after := js.Conn().Stats()
	b.ReportMetric(float64(after.OutMsgs-before.OutMsgs)/float64(b.N), "msgs/op")
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

// benchmarkStep runs nine-step runs, many at once: one op is a step.
// With complete, the ninth step completes its run, as a real run's does
// (a status change: index entries move); without, every step keeps the
// status.
func benchmarkStep(b *testing.B, s *kvstore.Store, complete bool) {
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
			snap, err := s.Load(ctx, run.ID, checkpoint.AtStep(n))
			if err != nil {
				b.Fatal(err)
			}
			next := snap.Run
			next.Step, next.StepName, next.Steps = n+1, fmt.Sprint("s", n+1), snap.Run.Steps+1
			cp := checkpoint.Checkpoint{RunID: run.ID, Step: n, Name: snap.Run.StepName, State: state, Next: next.StepName, Status: checkpoint.StatusRunning, Attempt: 1}
			if complete && n == 9 {
				next.Status, next.Step, next.StepName = checkpoint.StatusCompleted, n, cp.Name
				cp.Status, cp.Next = checkpoint.StatusCompleted, ""
			}
			if run, err = s.Commit(ctx, next, cp); err != nil {
				b.Fatal(err)
			}
			n++
		}
	})
}

// benchLive is the live runs beside the ended ones in BenchmarkListLive.
const benchLive = 100

// listBench holds a bucket per server and history size, filled once
// (filling 100,000 runs takes a while).
var listBench = map[benchKey]*kvstore.Store{}

type benchKey struct {
	js    jetstream.JetStream
	ended int
}

// fillBench returns a store with benchLive running runs and ended
// completed runs, created as a client would (CreateRun), 32 at a time.
// The live runs are spread over the history, the oldest as old as the
// first ended one: their index entries lie all over the stream.
func fillBench(b *testing.B, js jetstream.JetStream, ended int) *kvstore.Store {
	if s := listBench[benchKey{js, ended}]; s != nil {
		return s
	}
	s, err := kvstore.New(context.Background(), js, kvstore.Options{Bucket: uniqueBucket(), Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			stride := (ended + benchLive) / benchLive
			for i := int(next.Add(1)) - 1; i < ended+benchLive; i = int(next.Add(1)) - 1 {
				st := checkpoint.StatusCompleted
				if i%stride == 0 {
					st = checkpoint.StatusRunning
				}
				run := checkpoint.Run{ID: fmt.Sprintf("r-%07d", i), Workflow: fmt.Sprintf("wf-%d", i%4), Version: 1, Status: st, Step: 1, StepName: "s1"}
				if _, err := s.CreateRun(context.Background(), run); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	b.Logf("%d ended and %d live runs created in %v", ended, benchLive, time.Since(start))
	listBench[benchKey{js, ended}] = s
	return s
}

// benchHistory is the ended runs of the second round of BenchmarkListLive:
// 100,000, or DURABLE_BENCH_HISTORY.
func benchHistory(b *testing.B) []int {
	n := 100000
	if v := os.Getenv("DURABLE_BENCH_HISTORY"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("DURABLE_BENCH_HISTORY=%q: %v", v, err)
		}
	}
	return []int{0, n}
}

// BenchmarkListLive measures the listings of the run index beside a
// history of ended runs (none, then benchHistory): what reads the live
// runs and a page of runs must cost the same with or without the history
// (go test ./pkg/checkpoint/kvstore -run '^$' -bench ListLive -benchtime
// 200x).
func BenchmarkListLive(b *testing.B) {
	js := connect(b)
	for _, ended := range benchHistory(b) {
		b.Run(fmt.Sprintf("H=%d", ended), func(b *testing.B) {
			s := fillBench(b, js, ended)
			ctx := context.Background()
			b.Run("ListRuns-running", func(b *testing.B) {
				for b.Loop() {
					runs, err := s.ListRuns(ctx, checkpoint.Filter{Status: checkpoint.StatusRunning})
					if err != nil || len(runs) != benchLive {
						b.Fatalf("ListRuns(running) = %d runs, %v", len(runs), err)
					}
				}
			})
			for _, q := range []struct {
				name string
				q    checkpoint.PageQuery
				want int
			}{
				{"PageRuns-newest", checkpoint.PageQuery{Limit: 50}, 50},
				{"PageRuns-running", checkpoint.PageQuery{Status: checkpoint.StatusRunning, Limit: 50}, 50},
				{"PageRuns-completed", checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Limit: 50}, min(50, ended)},
				{"PageRuns-completed-wf", checkpoint.PageQuery{Status: checkpoint.StatusCompleted, Workflow: "wf-1", Limit: 50}, min(50, ended/4)},
			} {
				b.Run(q.name, func(b *testing.B) {
					for b.Loop() {
						p, err := s.PageRuns(ctx, q.q)
						if err != nil || len(p.Runs) != q.want {
							b.Fatalf("PageRuns(%+v) = %d runs, %v; want %d", q.q, len(p.Runs), err, q.want)
						}
					}
				})
			}
			// CountRuns counts the index's entries without reading a run:
			// the live ones by reading their listing, the ended ones as
			// the server counts a listing's subjects.
			b.Run("CountRuns", func(b *testing.B) {
				for b.Loop() {
					c, err := s.CountRuns(ctx)
					if err != nil || c.Status[checkpoint.StatusCompleted] != int64(ended) || c.Status[checkpoint.StatusRunning] != benchLive {
						b.Fatalf("CountRuns = %+v, %v", c, err)
					}
				}
			})
			if ended == 0 {
				return
			}
			// A page deep in the history: after the cursor of a run
			// created halfway.
			mid, err := s.GetRun(ctx, fmt.Sprintf("r-%07d", ended/2))
			if err != nil {
				b.Fatal(err)
			}
			b.Run("PageRuns-middle", func(b *testing.B) {
				q := checkpoint.PageQuery{Limit: 50, After: checkpoint.Cursor{At: mid.CreatedAt, ID: mid.ID}}
				for b.Loop() {
					if p, err := s.PageRuns(ctx, q); err != nil || len(p.Runs) != 50 {
						b.Fatalf("PageRuns(%+v) = %d runs, %v", q, len(p.Runs), err)
					}
				}
			})
		})
	}
}
