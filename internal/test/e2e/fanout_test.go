package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/examples/fanout"
	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// One run per new boundary of a fan-out (issue 15).
const fanOutPlan = "fanout-1:2.5:after-effect," + // branch 5 paid, not yet journaled or checkpointed
	"fanout-2:2.1:after-checkpoint," + // the last (only) branch committed, the join not yet published
	"fanout-3:1:after-checkpoint," + // the fan-out committed, its branches not yet published
	"fanout-4:2:after-checkpoint" // the join committed, the run's completion not yet acked

var fanOutRuns = map[string]int{"fanout-1": 8, "fanout-2": 1, "fanout-3": 8, "fanout-4": 8}

// Acceptance (issue 15): SIGKILL at every new boundary of a fan-out pays
// nobody twice, never loses the join, and a replay of every step message
// afterwards changes nothing. Both stores, real worker processes.
func TestFanOutCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // its own servers, payments API and worker processes
			f := newFleet(t, kind, fanOutPlan)
			f.startWorker()
			f.startWorker()
			f.waitRegistered()
			ctx := context.Background()
			ids := []string{"fanout-1", "fanout-2", "fanout-3", "fanout-4"}
			for i, id := range ids {
				// One run at a time: a dying worker takes its other
				// deliveries with it, and their redelivery would skip
				// their own first-delivery fault.
				input := fmt.Sprintf(`{"branches": %d}`, fanOutRuns[id])
				if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: fanout.Name, RunID: id, Input: json.RawMessage(input)}); err != nil {
					t.Fatal(err)
				}
				f.drive([]string{id}, 2*time.Minute, nil)
				// fanout-4 dies after its last commit, which already shows
				// the run completed: its worker's death may be reaped a
				// moment after drive saw that.
				if got := f.waitKills(i+1, 10*time.Second); got != i+1 {
					t.Errorf("after %s: %d workers killed, want %d", id, got, i+1)
				}
			}
			pays := listPayments(t, f)
			for _, id := range ids {
				checkFanOut(t, f, id, pays)
			}
			if r := pays["fanout-1:step2.5"].Requests; r != 2 {
				t.Errorf("fanout-1: branch 5 presented its key %d times, want 2 (crash after the effect)", r)
			}
			waitDrainedOf(t, f, fanout.Name)

			before := fanOutSnapshot(t, f, ids)
			nc, js := f.nats.Connect(t)
			n := testenv.RepublishSteps(t, js)
			nc.Close()
			t.Logf("republished %d step messages", n)
			waitDrainedOf(t, f, fanout.Name)
			if after := fanOutSnapshot(t, f, ids); after != before {
				t.Errorf("replaying the stream changed state:\nbefore %s\nafter  %s", before, after)
			}
			f.stopAll()
		})
	}
}

// checkFanOut asserts a completed fanout run: the fan-out and the join as
// its steps, every branch checkpointed, one payment of 1 EUR per branch
// under the branch's key, and the join's sum.
func checkFanOut(t testing.TB, f *fleet, id string, pays map[string]payments.Payment) {
	t.Helper()
	ctx := context.Background()
	n := fanOutRuns[id]
	run, err := f.store.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != checkpoint.StatusCompleted {
		t.Errorf("%s: status %s (%s)", id, run.Status, run.Error)
		return
	}
	cps, err := f.store.Checkpoints(ctx, id)
	if err != nil || len(cps) != 2 {
		t.Fatalf("%s: %d checkpoints (%v), want the fan-out and the join", id, len(cps), err)
	}
	var st fanout.State
	if err := json.Unmarshal(cps[1].State, &st); err != nil || st.Paid != int64(n) {
		t.Errorf("%s: join state %s (%v), want paid %d", id, cps[1].State, err, n)
	}
	branches, err := f.store.BranchCheckpoints(ctx, id, 2, n)
	if err != nil || len(branches) != n {
		t.Errorf("%s: %d branch checkpoints (%v), want %d", id, len(branches), err, n)
	}
	count := 0
	for _, p := range pays {
		if p.RunID == id {
			count++
			if p.Amount != 1 {
				t.Errorf("%s: payment %+v", id, p)
			}
		}
	}
	for i := 1; i <= n; i++ {
		if _, ok := pays[fmt.Sprintf("%s:step2.%d", id, i)]; !ok {
			t.Errorf("%s: no payment under the key of branch %d", id, i)
		}
	}
	if count != n {
		t.Errorf("%s: %d payments, want %d", id, count, n)
	}
}

// fanOutSnapshot renders what a replay must not change: the runs, their
// checkpoints and branch checkpoints, and the payments.
func fanOutSnapshot(t testing.TB, f *fleet, ids []string) string {
	t.Helper()
	branches := map[string][]checkpoint.Checkpoint{}
	for _, id := range ids {
		b, err := f.store.BranchCheckpoints(context.Background(), id, 2, fanOutRuns[id])
		if err != nil {
			t.Fatal(err)
		}
		branches[id] = b
	}
	b, _ := json.Marshal(branches)
	return runsSnapshot(t, f, ids) + string(b)
}

// Acceptance (issue 15): SIGKILL after a step that starts child runs is
// committed, before any child is created: the redelivery creates them
// (ids derived from the parent, so never twice), they wait for their
// adjusters holding no worker, and the last to end resumes the parent.
func TestChildRunsCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // its own servers, payments API and worker processes
			f := newFleet(t, kind, "batch-1:1:after-checkpoint")
			f.startWorker()
			f.startWorker()
			f.waitRegistered()
			ctx := context.Background()
			if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: "claims-batch", RunID: "batch-1", Input: json.RawMessage(`{"count": 3}`)}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, "children created", func() bool {
				_, err := f.store.GetRun(ctx, "batch-1-3")
				return err == nil
			})
			f.drive([]string{"batch-1-1", "batch-1-2", "batch-1-3"}, 2*time.Minute, nil)
			testenv.Eventually(t, time.Minute, "batch-1 completed", func() bool {
				run, err := f.store.GetRun(ctx, "batch-1")
				return err == nil && run.Status == checkpoint.StatusCompleted
			})
			if got := f.waitKills(1, 10*time.Second); got != 1 {
				t.Errorf("%d workers killed, want 1", got)
			}
			cps, err := f.store.Checkpoints(ctx, "batch-1")
			if err != nil || len(cps) != 2 {
				t.Fatalf("batch-1: %d checkpoints (%v)", len(cps), err)
			}
			var st struct {
				Paid int64 `json:"paid"`
			}
			if err := json.Unmarshal(cps[1].State, &st); err != nil || st.Paid != 3*1840 {
				t.Errorf("batch-1 state %s, want paid %d", cps[1].State, 3*1840)
			}
			pays := listPayments(t, f)
			for i := 1; i <= 3; i++ {
				id := fmt.Sprintf("batch-1-%d", i)
				if p, ok := pays[id+":step6"]; !ok || p.Amount != 1840 || p.Requests != 1 {
					t.Errorf("%s: payment %+v", id, p)
				}
			}
			if len(pays) != 3 {
				t.Errorf("%d payments, want 3", len(pays))
			}
			// A shipment, signalled while the replay is to come.
			if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: "shipment", RunID: "ship-1"}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.client.Signal(ctx, client.SignalRequest{RunID: "ship-1", Name: "delivered", Data: json.RawMessage(`{"pod":"J."}`), ID: "carrier-1", By: "carrier"}); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, "ship-1 completed", func() bool {
				run, err := f.store.GetRun(ctx, "ship-1")
				return err == nil && run.Status == checkpoint.StatusCompleted
			})

			// A replay of every step message changes nothing: no child is
			// started again, no parent resumed twice, no signal consumed twice.
			ids := []string{"batch-1", "batch-1-1", "batch-1-2", "batch-1-3", "ship-1"}
			waitDrainedOf(t, f, "claims-batch")
			waitDrainedOf(t, f, "claim")
			before := runsSnapshot(t, f, ids)
			nc, js := f.nats.Connect(t)
			n := testenv.RepublishSteps(t, js)
			nc.Close()
			t.Logf("republished %d step messages", n)
			for _, wf := range []string{"claims-batch", "claim", "shipment"} {
				waitDrainedOf(t, f, wf)
			}
			if after := runsSnapshot(t, f, ids); after != before {
				t.Errorf("replaying the stream changed state:\nbefore %s\nafter  %s", before, after)
			}
			f.stopAll()
		})
	}
}

// runsSnapshot renders the runs of ids with their checkpoints, and the
// payments: what a replay must not change.
func runsSnapshot(t testing.TB, f *fleet, ids []string) string {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for _, id := range ids {
		run, err := f.store.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		cps, err := f.store.Checkpoints(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = map[string]any{"run": run, "rev": run.Rev, "checkpoints": cps}
	}
	out["payments"] = listPayments(t, f)
	b, _ := json.Marshal(out)
	return string(b)
}
