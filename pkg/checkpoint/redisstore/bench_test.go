package redisstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/redisstore"
	"github.com/redis/go-redis/v9"
)

// BenchmarkCommit measures the step path's write, a step's Commit, with
// 128 commits in flight as a worker has them (durable bench runs one
// worker at concurrency 128). running: every commit keeps the run
// running, the common case. run9: each run is created, commits eight
// steps running and a ninth that completes it, as durable bench's
// claims-9 does; an op is one step, its share of the create included.
// Besides ns/op it reports the redis-server's CPU per op (INFO cpu),
// which other processes on the machine do not blur as much.
func BenchmarkCommit(b *testing.B) {
	client := benchClient(b, 16)
	for _, steps := range []int{0, 9} {
		name := "running"
		if steps > 0 {
			name = "run" + strconv.Itoa(steps)
		}
		b.Run(name, func(b *testing.B) {
			s := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix()})
			benchCommits(b, client, s, steps)
		})
	}
}

// benchClient starts a redis-server for a benchmark, with extraArgs
// (testenv.StartRedis), and returns a client with a pool of poolSize.
func benchClient(b *testing.B, poolSize int, extraArgs ...string) *redis.Client {
	srv := testenv.StartRedis(b, extraArgs...)
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	opts.PoolSize = poolSize
	client := redis.NewClient(opts)
	b.Cleanup(func() { _ = client.Close() })
	return client
}

// benchCommits commits b.N steps, 128 at a time, on runs of steps steps
// each (0: runs that never end).
func benchCommits(b *testing.B, client *redis.Client, s *redisstore.Store, steps int) {
	ctx := context.Background()
	state := []byte(`{"claim":"` + strings.Repeat("x", 180) + `"}`)
	var ids atomic.Int64
	start := func() checkpoint.Run {
		run, err := s.CreateRun(ctx, checkpoint.Run{
			ID: fmt.Sprintf("bench-%06d", ids.Add(1)), Workflow: "claim", Version: 1,
			Status: checkpoint.StatusRunning, Step: 1, StepName: "step1",
		})
		if err != nil {
			b.Error(err)
		}
		return run
	}
	cpu0 := testenv.RedisCPU(b, client)
	b.SetParallelism(max(1, 128/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		run := start()
		for pb.Next() {
			n := run.Step
			cp := checkpoint.Checkpoint{Step: n, Name: run.StepName, State: state, Status: checkpoint.StatusRunning}
			run.Step, run.StepName, run.UpdatedAt = n+1, "step"+strconv.Itoa(n+1), time.Now().UTC()
			if steps > 0 && n == steps {
				cp.Status, run.Status, run.Step = checkpoint.StatusCompleted, checkpoint.StatusCompleted, n
			}
			var err error
			if run, err = s.Commit(ctx, run, cp); err != nil {
				b.Error(err)
				return
			}
			if run.Status == checkpoint.StatusCompleted {
				run = start()
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((testenv.RedisCPU(b, client)-cpu0).Microseconds())/float64(b.N), "redis-µs/op")
}
