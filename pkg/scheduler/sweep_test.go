package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/scheduler"
)

// sweepFlow is the workflow of the runs seeded here; no worker runs it,
// so every message the scheduler publishes stays in the step stream.
const sweepFlow = "sweep"

// seedParked stores the runs of ids parked at step 1 for an approval of
// group adjusters (rejected on expiry) that expired at deadline, and
// indexes their deadlines, as a worker parking them would.
func seedParked(t testing.TB, f *testfleet.Fleet, ids []string, deadline time.Time) {
	t.Helper()
	ctx := context.Background()
	if err := queue.Provision(ctx, f.JS, queue.Config{}); err != nil { // no worker here to do it
		t.Fatal(err)
	}
	since := deadline.Add(-time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(ids); i += 32 {
				if err := seedOne(ctx, f.Store, ids[i], since, deadline); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// seedOne stores run id waiting at step 1 since since, until deadline:
// for an approval, or a wait of another kind (a timer, a signal).
func seedOne(ctx context.Context, store checkpoint.Store, id string, since, deadline time.Time, kind ...string) error {
	payload := json.RawMessage(fmt.Sprintf(`{"run_id":%q,"amount":1840,"reason":"payout over 1000"}`, id))
	hash := fmt.Sprintf("%064x", len(id))
	run := checkpoint.Run{
		ID: id, Workflow: sweepFlow, Version: 1, Status: checkpoint.StatusWaiting, Step: 1, StepName: "approve",
		Input: json.RawMessage(`{"amount":1840}`), StartedBy: "test", CreatedAt: since, UpdatedAt: since,
		Wait: &checkpoint.Wait{Kind: checkpoint.WaitApproval, Step: 1, StepName: "approve", Payload: payload,
			PayloadSHA256: hash, Group: "adjusters", Since: since, Deadline: deadline, OnExpiry: "reject"},
		Audit: []checkpoint.AuditEntry{{Kind: checkpoint.AuditParked, Step: 1, At: since, Group: "adjusters", PayloadSHA256: hash}},
	}
	if len(kind) > 0 {
		run.Wait = &checkpoint.Wait{Kind: kind[0], Step: 1, StepName: "approve", Name: "delivered", Since: since, Deadline: deadline}
		run.Audit = nil
	}
	if _, err := store.CreateRun(ctx, run); err != nil {
		return fmt.Errorf("seed %s: %w", id, err)
	}
	return store.IndexDue(ctx, id, deadline)
}

// stepMessages counts the messages of each run of sweepFlow in the step
// stream.
func stepMessages(t testing.TB, f *testfleet.Fleet) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	st, err := f.JS.Stream(ctx, queue.StepStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(queue.StepFilter(sweepFlow)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// wantExpiredOnce checks that each run of ids was expired exactly once:
// one expiry in its audit, one decision, one step message.
func wantExpiredOnce(t *testing.T, f *testfleet.Fleet, ids []string) {
	t.Helper()
	runs, err := f.Store.ListRuns(context.Background(), checkpoint.Filter{Workflow: sweepFlow})
	if err != nil {
		t.Fatal(err)
	}
	byID := make(map[string]checkpoint.Run, len(runs))
	for _, r := range runs {
		byID[r.ID] = r
	}
	msgs := stepMessages(t, f)
	bad := 0
	for _, id := range ids {
		r := byID[id]
		expired := 0
		for _, e := range r.Audit {
			if e.Kind == checkpoint.AuditExpired {
				expired++
			}
		}
		n := msgs[queue.StepSubject(sweepFlow, id)]
		if r.Status != checkpoint.StatusRunning || expired != 1 || len(r.Approvals) != 1 || r.Resumes != 1 || n != 1 {
			if bad++; bad <= 5 {
				t.Errorf("%s: %s, %d expiries, %d decisions, %d resumes, %d step messages; want running and 1 each",
					id, r.Status, expired, len(r.Approvals), r.Resumes, n)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d runs not expired exactly once", bad, len(ids))
	}
}

// sweepAtOnce runs one Sweep of every scheduler at the same moment, and
// returns when all are done.
func sweepAtOnce(schs []*scheduler.Scheduler) {
	ctx := context.Background()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range schs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s.Sweep(ctx)
		}()
	}
	close(start)
	wg.Wait()
}

// Issue 16: two to four schedulers sweeping the same thousands of expired
// waits at once, in small batches so that their claims interleave, handle
// each exactly once.
func TestSchedulersSweepEachWaitOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of runs")
	}
	for _, tc := range []struct {
		kind       string
		runs, schs int
	}{{"redis", 4000, 2}, {"redis", 4000, 4}, {"kv", 1000, 3}} {
		t.Run(fmt.Sprintf("%s/%d", tc.kind, tc.schs), func(t *testing.T) {
			f := testfleet.New(t, tc.kind)
			ids := make([]string, tc.runs)
			for i := range ids {
				ids[i] = fmt.Sprintf("sw-%05d", i)
			}
			seedParked(t, f, ids, time.Now().Add(-time.Second))
			schs := make([]*scheduler.Scheduler, tc.schs)
			for i := range schs {
				var err error
				if schs[i], err = scheduler.New(scheduler.Config{Client: f.Client, Batch: 64, Parallel: 256}); err != nil {
					t.Fatal(err)
				}
			}
			began := time.Now()
			sweepAtOnce(schs)
			t.Logf("%d schedulers swept %d waits in %v", tc.schs, tc.runs, time.Since(began).Round(time.Millisecond))
			var rejected int64
			for i, s := range schs {
				st := s.Stats()
				t.Logf("scheduler %d: %+v", i, st)
				if st.Errors != 0 {
					t.Errorf("scheduler %d: %d errors", i, st.Errors)
				}
				rejected += st.Rejected
			}
			if rejected != int64(tc.runs) {
				t.Errorf("%d rejections in all, want %d", rejected, tc.runs)
			}
			wantExpiredOnce(t, f, ids)
			if left, err := f.Store.ClaimDue(context.Background(), time.Now().Add(time.Hour), tc.runs, time.Minute); err != nil || len(left) != 0 {
				t.Errorf("index after the sweep: %d entries (%v), want none", len(left), err)
			}
		})
	}
}

// meddling is the real store with someone acting between the scheduler's
// read of a run and its compare-and-set: before it for decide, after it
// for repark.
type meddling struct {
	checkpoint.Store
	decide, repark string
	at             time.Time // repark's new deadline
	act            func(ctx context.Context, id string) error
	once           sync.Map
}

func (m *meddling) UpdateRun(ctx context.Context, run checkpoint.Run) (checkpoint.Run, error) {
	if _, done := m.once.LoadOrStore(run.ID, true); done {
		return m.Store.UpdateRun(ctx, run)
	}
	if run.ID == m.decide {
		if err := m.act(ctx, run.ID); err != nil {
			return checkpoint.Run{}, err
		}
	}
	stored, err := m.Store.UpdateRun(ctx, run)
	if err == nil && run.ID == m.repark {
		// The resumed step ran and parked again before the batch finished.
		err = m.Store.IndexDue(ctx, run.ID, m.at)
	}
	return stored, err
}

// The batch path keeps the guarantees of one expiry at a time: a run
// decided between the scheduler's read and its compare-and-set is not
// expired, and a deadline indexed again meanwhile is kept.
func TestSweepBatchRaces(t *testing.T) {
	f := testfleet.New(t, "redis")
	ctx := context.Background()
	ids := []string{"race-decided", "race-reparked", "race-plain"}
	seedParked(t, f, ids, time.Now().Add(-time.Second))
	m := &meddling{Store: f.Store, decide: "race-decided", repark: "race-reparked", at: time.Now().Add(time.Hour)}
	m.act = func(ctx context.Context, id string) error {
		_, err := f.Client.Decide(ctx, client.Decision{RunID: id, By: "alice", Channel: client.ChannelCLI})
		return err
	}
	sch, err := scheduler.New(scheduler.Config{Client: client.New(f.JS, m)})
	if err != nil {
		t.Fatal(err)
	}
	if n := sch.Sweep(ctx); n != 3 {
		t.Fatalf("swept %d, want 3", n)
	}
	if st := sch.Stats(); st.Rejected != 2 || st.Errors != 0 {
		t.Fatalf("stats %+v: want 2 rejected (the decided run is not), no errors", st)
	}
	decided := f.Get("race-decided")
	if len(decided.Approvals) != 1 || decided.Approvals[0].By != "alice" || kinds(decided) != "parked,decision" {
		t.Fatalf("decided run: approvals %+v, audit %q; want alice's decision alone", decided.Approvals, kinds(decided))
	}
	wantExpiredOnce(t, f, ids[1:])
	if msgs := stepMessages(t, f); msgs[queue.StepSubject(sweepFlow, "race-decided")] != 1 {
		t.Fatalf("decided run: %d step messages, want its decision's one", msgs[queue.StepSubject(sweepFlow, "race-decided")])
	}
	// The reparked run's new deadline stands; the others are gone.
	if got, err := f.Store.ClaimDue(ctx, m.at.Add(-time.Second), 10, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("claim before the new deadline: %q (%v), want nothing", got, err)
	}
	if got, err := f.Store.ClaimDue(ctx, m.at, 10, time.Minute); err != nil || len(got) != 1 || got[0] != "race-reparked" {
		t.Fatalf("claim at the new deadline: %q (%v), want race-reparked", got, err)
	}
}

// A batch whose messages could not be published leaves its entries
// claimed; the pass that claims them after the lease publishes the
// resumes of the runs the first one expired, once each, and finishes
// the entries.
func TestSweepRetriesFailedPublish(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			f := testfleet.New(t, kind)
			ctx := context.Background()
			ids := []string{"pub-1", "pub-2", "pub-3"}
			seedParked(t, f, ids, time.Now().Add(-time.Second))
			// A timer and a signal wait owe their step message too.
			others := map[string]string{"pub-timer": checkpoint.WaitTimer, "pub-signal": checkpoint.WaitSignal}
			for id, k := range others {
				if err := seedOne(ctx, f.Store, id, time.Now().Add(-time.Hour), time.Now().Add(-time.Second), k); err != nil {
					t.Fatal(err)
				}
			}
			// A JetStream connection that is closed: every publish fails.
			nc, err := nats.Connect(f.URL)
			if err != nil {
				t.Fatal(err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			nc.Close()
			now := time.Now()
			const lease = time.Minute
			broken, err := scheduler.New(scheduler.Config{Client: client.New(js, f.Store), Lease: lease, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			broken.Sweep(ctx)
			if st := broken.Stats(); st.Errors != 5 || st.Rejected != 0 || st.Woke != 0 {
				t.Fatalf("stats with publishes failing: %+v; want 5 errors, nothing counted", st)
			}
			for _, id := range append([]string{"pub-timer", "pub-signal"}, ids...) {
				if r := f.Get(id); r.Status != checkpoint.StatusRunning {
					t.Fatalf("%s: %s; the expiry is stored before the publish", id, r.Status)
				}
			}
			if n := len(stepMessages(t, f)); n != 0 {
				t.Fatalf("%d runs have step messages, want none", n)
			}
			later := now.Add(lease + time.Second)
			retry, err := scheduler.New(scheduler.Config{Client: f.Client, Lease: lease, Now: func() time.Time { return later }})
			if err != nil {
				t.Fatal(err)
			}
			if n := retry.Sweep(ctx); n != 5 {
				t.Fatalf("the retry swept %d, want the 5 entries left claimed", n)
			}
			if st := retry.Stats(); st.Errors != 0 {
				t.Fatalf("retry stats %+v", st)
			}
			wantExpiredOnce(t, f, ids)
			msgs := stepMessages(t, f)
			for id := range others {
				if n := msgs[queue.StepSubject(sweepFlow, id)]; n != 1 {
					t.Errorf("%s: %d step messages, want 1", id, n)
				}
			}
			if got, err := f.Store.ClaimDue(ctx, later.Add(2*lease), 10, time.Minute); err != nil || len(got) != 0 {
				t.Fatalf("index after the retry: %q (%v), want empty", got, err)
			}
		})
	}
}

// BenchmarkSweep: expired waits swept per second by 1, 2 and 4
// schedulers, 20,000 at a time (go test -run - -bench Sweep
// ./pkg/scheduler/). The waits are seeded into the store directly; the
// schedulers log to a file, as `durable scheduler` would.
func BenchmarkSweep(b *testing.B) {
	const waits = 20000
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("schedulers=%d", n), func(b *testing.B) {
			f := testfleet.New(b, "redis")
			logf, err := os.Create(filepath.Join(b.TempDir(), "scheduler.log"))
			if err != nil {
				b.Fatal(err)
			}
			defer logf.Close()
			log := zerolog.New(logf).With().Timestamp().Logger()
			var swept, cpu time.Duration
			for i := range b.N {
				ids := make([]string, waits)
				for k := range ids {
					ids[k] = fmt.Sprintf("b%d-%06d", i, k)
				}
				seedParked(b, f, ids, time.Now().Add(-time.Second))
				schs := make([]*scheduler.Scheduler, n)
				for k := range schs {
					if schs[k], err = scheduler.New(scheduler.Config{Client: f.Client, Logger: &log}); err != nil {
						b.Fatal(err)
					}
				}
				began, cpuBefore := time.Now(), cpuTime()
				sweepAtOnce(schs)
				swept += time.Since(began)
				cpu += cpuTime() - cpuBefore
				for _, s := range schs {
					if st := s.Stats(); st.Errors != 0 {
						b.Fatalf("%d errors", st.Errors)
					}
				}
			}
			b.ReportMetric(float64(waits*b.N)/swept.Seconds(), "waits/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(waits*b.N), "cpu-µs/wait")
		})
	}
}

// cpuTime is the CPU time this process used so far: the schedulers' and
// the embedded nats-server's, not redis-server's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
