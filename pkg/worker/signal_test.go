package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// A step that waits again after its wait expired (a reminder) parks again
// rather than spinning on the expiry, and the signal that comes later
// completes it.
func TestSignalWaitAgainAfterExpiry(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var expiries atomic.Int64
			wf := steps.New[fanState]("remind", 1)
			goSig := wf.Signal("go")
			wf.
				Step("await", func(_ context.Context, s *steps.Context, st fanState) (steps.Outcome[fanState], error) {
					sig, err := s.Signal("go")
					switch {
					case errors.Is(err, steps.ErrSignalExpired):
						expiries.Add(1)
						return steps.AwaitSignal(goSig, time.Hour), nil
					case err != nil:
						return steps.Outcome[fanState]{}, err
					case sig == nil:
						return steps.AwaitSignal(goSig, time.Hour), nil
					}
					return steps.Complete(st), nil
				})
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
			ctx := context.Background()
			f.Start("remind", "rem-1", "")
			first := f.WaitStatus("rem-1", checkpoint.StatusWaiting, 30*time.Second)
			if res, err := f.Client.Expire(ctx, "rem-1", time.Now().Add(2*time.Hour)); err != nil || res.Action != client.ExpireSignal {
				t.Fatalf("expire: %+v %v", res, err)
			}
			var again checkpoint.Run
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				again = f.Get("rem-1")
				if (again.Status == checkpoint.StatusWaiting && again.Rev > first.Rev+1) || time.Now().After(deadline) {
					break
				}
			}
			if again.Status != checkpoint.StatusWaiting || expiries.Load() != 1 {
				t.Fatalf("after the expiry: %s, %d expiries seen; want waiting again after one", again.Status, expiries.Load())
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "rem-1", Name: "go", ID: "go-1"}); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("rem-1", checkpoint.StatusCompleted, 30*time.Second)
			if expiries.Load() != 1 {
				t.Fatalf("%d expiries seen, want 1", expiries.Load())
			}
		})
	}
}

// waitParkedAgain waits until run id is waiting at a revision past after,
// and returns it.
func waitParkedAgain(t *testing.T, f *testfleet.Fleet, id string, after uint64) checkpoint.Run {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		run := f.Get(id)
		if run.Status == checkpoint.StatusWaiting && run.Rev > after {
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s at rev %d, want waiting past rev %d", id, run.Status, run.Rev, after)
		}
	}
}

// A run that waits again after every expiry, and consumes signal after
// signal over its life, keeps room for the next signal: what a step
// consumed, and the markers of expiries, do not count against the
// run's bound, and the record does not keep their data (issue 23 item 1).
func TestSignalRoomAfterManyExpiriesAndSignals(t *testing.T) {
	const rounds = client.MaxSignalsPerRun + 10
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			wf := steps.New[counter]("ticker", 1)
			goSig, tick := wf.Signal("go"), wf.Signal("tick")
			count := wf.Ref("count")
			wf.
				Step("await", func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
					sig, err := s.Signal("go")
					switch {
					case errors.Is(err, steps.ErrSignalExpired), err == nil && sig == nil:
						return steps.AwaitSignal(goSig, time.Hour), nil
					case err != nil:
						return steps.Outcome[counter]{}, err
					}
					return steps.Next(count, st), nil
				}).
				Step("count", onSignal(tick, func(_ *checkpoint.Signal, st counter) steps.Outcome[counter] {
					if st.N++; st.N == rounds {
						return steps.Complete(st)
					}
					return steps.Next(count, st)
				}))
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
			ctx := context.Background()
			f.Start("ticker", "tick-1", "")
			run := f.WaitStatus("tick-1", checkpoint.StatusWaiting, 30*time.Second)
			now := time.Now()
			for i := 0; i < rounds; i++ {
				now = now.Add(2 * time.Hour)
				if res, err := f.Client.Expire(ctx, "tick-1", now); err != nil || res.Action != client.ExpireSignal {
					t.Fatalf("expiry %d: %+v %v", i+1, res, err)
				}
				run = waitParkedAgain(t, f, "tick-1", run.Rev)
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "tick-1", Name: "go", ID: "go-1"}); err != nil {
				t.Fatalf("signal after %d expiries: %v", rounds, err)
			}
			for i := 0; i < rounds; i++ {
				run = waitParkedAgain(t, f, "tick-1", run.Rev)
				if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "tick-1", Name: "tick", ID: fmt.Sprintf("tick-%d", i)}); err != nil {
					t.Fatalf("signal %d: %v", i+1, err)
				}
			}
			end := f.WaitStatus("tick-1", checkpoint.StatusCompleted, 30*time.Second)
			if len(end.Signals) != 0 {
				t.Errorf("the completed run keeps %d signals on its record, want none (all were consumed)", len(end.Signals))
			}
			// A retry of a consumed signal is still answered as a duplicate.
			res, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "tick-1", Name: "tick", ID: "tick-3"})
			if err != nil || !res.Duplicate {
				t.Errorf("retry of consumed signal tick-3: %+v %v, want a duplicate", res, err)
			}
		})
	}
}

// The marker of an expiry that a re-run of the step made moot (the real
// signal came before the step ran again) does not fail a later wait for
// the same name (issue 23 item 2).
func TestStaleExpiryMarkerDoesNotFailLaterWait(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			wf := steps.New[counter]("twice", 1)
			goSig, second := wf.Signal("go"), wf.Ref("second")
			wait := func(name string) steps.StepFunc[counter] {
				return onSignal(goSig, func(sig *checkpoint.Signal, st counter) steps.Outcome[counter] {
					st.Trail = append(st.Trail, name+":"+sig.ID)
					if name == "second" {
						return steps.Complete(st)
					}
					return steps.Next(second, st)
				})
			}
			wf.Step("first", wait("first")).Step("second", wait("second"))
			reg := steps.NewRegistry().MustRegister(wf)
			f := testfleet.New(t, kind)
			_, stop := f.StartWorker(reg, nil)
			ctx := context.Background()
			f.Start("twice", "tw-1", "")
			f.WaitStatus("tw-1", checkpoint.StatusWaiting, 30*time.Second)
			stop()
			// The wait expires and the real signal comes before a worker
			// runs the step again.
			if res, err := f.Client.Expire(ctx, "tw-1", time.Now().Add(2*time.Hour)); err != nil || res.Action != client.ExpireSignal {
				t.Fatalf("expire: %+v %v", res, err)
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "tw-1", Name: "go", ID: "go-1"}); err != nil {
				t.Fatal(err)
			}
			f.StartWorker(reg, nil)
			run := f.WaitStatus("tw-1", checkpoint.StatusWaiting, 30*time.Second)
			if run.Step != 2 {
				t.Fatalf("run waits at step %d (%s), want step 2", run.Step, run.Error)
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "tw-1", Name: "go", ID: "go-2"}); err != nil {
				t.Fatal(err)
			}
			f.WaitStatus("tw-1", checkpoint.StatusCompleted, 30*time.Second)
		})
	}
}

// A run record written before consumed signals left the record holds
// them with consumed_by set: they neither count against the bound nor
// are read again, they move to Consumed when the run is next written,
// and a retry of one is still a duplicate.
func TestSignalsConsumedByAnEarlierVersion(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			wf := steps.New[counter]("legacy", 1)
			goSig, await := wf.Signal("go"), wf.Ref("await")
			wf.
				Step("first", func(_ context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
					return steps.Next(await, st), nil
				}).
				Step("await", onSignal(goSig, func(sig *checkpoint.Signal, st counter) steps.Outcome[counter] {
					st.Trail = append(st.Trail, sig.ID)
					return steps.Complete(st)
				}))
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(wf), nil)
			ctx := context.Background()
			f.Start("legacy", "leg-1", "")
			run := f.WaitStatus("leg-1", checkpoint.StatusWaiting, 30*time.Second)
			// What the previous code wrote after step 1 consumed 100
			// signals: each kept on the record, marked consumed.
			for i := range client.MaxSignalsPerRun {
				run.Signals = append(run.Signals, checkpoint.Signal{Name: "go", ID: fmt.Sprintf("old-%d", i), Data: []byte(`{"n":1}`),
					By: "ana", Channel: "cli", At: run.CreatedAt, ConsumedBy: 1})
			}
			if _, err := f.Store.UpdateRun(ctx, run); err != nil {
				t.Fatal(err)
			}
			res, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "leg-1", Name: "go", ID: "new-1"})
			if err != nil || !res.Resumed {
				t.Fatalf("signal to a run holding %d consumed signals: %+v %v", client.MaxSignalsPerRun, res, err)
			}
			end := f.WaitStatus("leg-1", checkpoint.StatusCompleted, 30*time.Second)
			if len(end.Signals) != 0 || len(end.Consumed) != client.MaxSignalsPerRun+1 {
				t.Fatalf("after the commit: %d signals, %d consumed; want 0 and %d", len(end.Signals), len(end.Consumed), client.MaxSignalsPerRun+1)
			}
			var st counter
			cps := f.Checkpoints("leg-1")
			if err := json.Unmarshal(cps[len(cps)-1].State, &st); err != nil || len(st.Trail) != 1 || st.Trail[0] != "new-1" {
				t.Fatalf("step read %v (%v), want the new signal only", st.Trail, err)
			}
			dup, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "leg-1", Name: "go", ID: "old-7", Data: []byte(`{"n":1}`)})
			if err != nil || !dup.Duplicate || dup.Signal.ConsumedBy != 1 {
				t.Fatalf("retry of a signal consumed under the earlier version: %+v %v, want a duplicate consumed by step 1", dup, err)
			}
			if _, err := f.Client.Signal(ctx, client.SignalRequest{RunID: "leg-1", Name: "go", ID: "old-7", Data: []byte(`{"n":2}`)}); !errors.Is(err, client.ErrSignalIDReused) {
				t.Fatalf("the id of a consumed signal with other data: %v, want ErrSignalIDReused", err)
			}
		})
	}
}

// A worker whose build declares a signal without groups does not open it
// to every token by registering the same workflow version after one that
// restricted it: the restriction stays (found by a newcomer's walk).
func TestSignalGroupsKeptOverRegistrationWithout(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			body := func(_ context.Context, _ *steps.Context, st counter) (steps.Outcome[counter], error) {
				return steps.Complete(st), nil
			}
			f := testfleet.New(t, kind)
			restricted := steps.New[counter]("review", 1)
			restricted.Signal("reviewed", "reviewers")
			f.StartWorker(steps.NewRegistry().MustRegister(restricted.Step("only", body)), nil)
			// A second build registers (Setup is a worker's start, up to
			// its first pull).
			open := steps.New[counter]("review", 1)
			open.Signal("reviewed")
			w, err := worker.New(worker.Config{JetStream: f.JS, Store: f.Store,
				Registry: steps.NewRegistry().MustRegister(open.Step("only", body))})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Setup(context.Background()); err != nil {
				t.Fatal(err)
			}
			infos, err := f.Store.Workflows(context.Background())
			if err != nil || len(infos) != 1 {
				t.Fatalf("workflows %+v, %v", infos, err)
			}
			if g := infos[0].SignalGroups["reviewed"]; len(g) != 1 || g[0] != "reviewers" {
				t.Fatalf("after a registration without groups: reviewed may be sent by %v, want [reviewers]", g)
			}
		})
	}
}

// onSignal is a step that reads signal name, waits for it (an hour)
// while none came, and goes on with then once one did.
func onSignal(name steps.SignalRef[counter], then func(*checkpoint.Signal, counter) steps.Outcome[counter]) steps.StepFunc[counter] {
	return func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
		sig, err := s.Signal(name.Name())
		switch {
		case err != nil:
			return steps.Outcome[counter]{}, err
		case sig == nil:
			return steps.AwaitSignal(name, time.Hour), nil
		}
		return then(sig, st), nil
	}
}
