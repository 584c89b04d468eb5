package kvstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/checkpoint/kvstore"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkPurgeRuns measures Purge on claims-9 runs (nine steps, each a
// journalled model call and a checkpoint, two failures: 20 keys and the
// record), written 64 runs at once, purged 128 at once as the scheduler
// does; one op is a run purged. The sub-benchmarks put other runs' keys
// (benchOthers, three keys each) beside them: none; written before the
// runs (a big stream); written during the runs, between their keys (what
// a purge by wildcard would have to skip). cpu-µs/run is the process's
// CPU time (client and server) per run purged: on a loaded machine it
// shows what a purge costs better than runs/s.
func BenchmarkPurgeRuns(b *testing.B) {
	js := connect(b)
	for _, others := range []string{"alone", "big-stream", "interleaved"} {
		b.Run(others, func(b *testing.B) { benchPurgeRuns(b, js, others) })
	}
}

// benchOthers is how many other runs the big-stream and interleaved
// sub-benchmarks write keys of.
const benchOthers = 100000

func benchPurgeRuns(b *testing.B, js jetstream.JetStream, others string) {
	ctx := b.Context()
	bucket := uniqueBucket()
	s, err := kvstore.New(ctx, js, kvstore.Options{Bucket: bucket})
	if err != nil {
		b.Fatal(err)
	}
	if others == "big-stream" {
		writeOthers(b, js, bucket, benchOthers, nil)
	}
	var runs []checkpoint.Run
	if others == "interleaved" {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { writeOthers(b, js, bucket, benchOthers, done) })
		runs = writeClaims(b, s, b.N)
		close(done)
		wg.Wait()
	} else {
		runs = writeClaims(b, s, b.N)
	}
	b.ResetTimer()
	before, cpu := js.Conn().Stats(), cpuTime()
	began := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128)
	for _, run := range runs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := s.Purge(ctx, run, time.Hour); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	took, cpu := time.Since(began), cpuTime()-cpu
	b.StopTimer()
	b.ReportMetric(float64(len(runs))/took.Seconds(), "runs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(len(runs)), "cpu-µs/run")
	after := js.Conn().Stats()
	b.ReportMetric(float64(after.OutMsgs-before.OutMsgs)/float64(len(runs)), "msgs/run")
}

// writeClaims writes n ended claims-9 runs, 64 at once.
func writeClaims(b *testing.B, s *kvstore.Store, n int) []checkpoint.Run {
	ctx := b.Context()
	out := make([]checkpoint.Run, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				run, err := writeClaim(ctx, s, fmt.Sprint("claim-", i))
				if err != nil {
					b.Error(err)
					return
				}
				out[i] = run
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return out
}

// writeClaim writes one claims-9 run and ends it.
func writeClaim(ctx context.Context, s *kvstore.Store, id string) (checkpoint.Run, error) {
	state := []byte(`{"claim":"` + id + `","amount":1840,"currency":"EUR","note":"0123456789012345678901234567890123456789"}`)
	run, err := s.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Status: checkpoint.StatusRunning, Step: 1, StepName: "s1", Input: state})
	if err != nil {
		return run, err
	}
	for n := 1; n <= 9; n++ {
		if _, err := s.RecordCall(ctx, id, checkpoint.AtStep(n), checkpoint.CallRecord{Name: "model", Result: state}); err != nil {
			return run, err
		}
		if n == 3 || n == 6 {
			if _, err := s.RecordFailure(ctx, id, checkpoint.AtStep(n), checkpoint.Failure{Attempt: 1, Error: "model timeout"}); err != nil {
				return run, err
			}
		}
		next := run
		next.Step, next.StepName, next.Steps = n+1, fmt.Sprint("s", n+1), run.Steps+1
		cp := checkpoint.Checkpoint{RunID: id, Step: n, Name: run.StepName, State: state, Next: next.StepName, Status: checkpoint.StatusRunning, Attempt: 1}
		if n == 9 {
			next.Status, next.Step, next.StepName = checkpoint.StatusCompleted, n, cp.Name
			cp.Status, cp.Next = checkpoint.StatusCompleted, ""
		}
		if run, err = s.Commit(ctx, next, cp); err != nil {
			return run, err
		}
	}
	return run, nil
}

// writeOthers writes the keys of n other runs (a checkpoint, a journal
// entry, an audit entry each) into bucket, and when done is not nil goes
// on, round after round, until it closes.
func writeOthers(b *testing.B, js jetstream.JetStream, bucket string, n int, done chan struct{}) {
	ctx := b.Context()
	value := []byte(`{"state":"0123456789012345678901234567890123456789012345678901234567890123456789"}`)
	for round := 0; ; round++ {
		for i := range n {
			id := fmt.Sprint("other-", round, "-", i)
			for _, key := range []string{"cp." + id + ".1", "j." + id + ".1", "run." + id + ".a.1"} {
				if _, err := js.PublishAsync("$KV."+bucket+"."+key, value); err != nil {
					b.Error(err)
					return
				}
			}
			if i%1000 == 999 {
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
					return
				}
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return
		}
		if done == nil {
			return
		}
		select {
		case <-done:
			return
		default:
		}
	}
}

// cpuTime is the CPU time the process used so far (client and embedded
// server): on a machine other work loads, what a purge costs shows
// better in it than in the runs purged a second.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
