package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// One run per boundary of the step protocol.
const crashPlan = "claim-0042:7," + // before step 7 runs (after step 6 paid and committed)
	"claim-0043:6:after-effect," + // payment made, not yet journaled or checkpointed
	"claim-0044:6:after-checkpoint," + // step 6 committed, step 7 not yet published
	"claim-0045:6:after-publish," + // step 7 published, step 6 not yet acked
	"claim-0046:6:hang" // step 6 hangs past the ack wait; a second worker takes it

var crashRuns = []string{"claim-0042", "claim-0043", "claim-0044", "claim-0045", "claim-0046"}

func TestCrashAtEveryBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // its own servers, payments API and worker processes
			f := newFleet(t, kind, crashPlan)
			f.startWorker()
			f.startWorker()
			f.waitRegistered()
			ctx := context.Background()
			// The long step first, alone, so that the hung worker is not
			// killed by another fault before the second worker takes over.
			if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: "claim", RunID: "claim-0046"}); err != nil {
				t.Fatal(err)
			}
			f.drive([]string{"claim-0046"}, 2*time.Minute, nil)
			// Kill the hung worker once the step it still holds was
			// taken over and committed, and once every step it may
			// have run meanwhile on its other slots (steps 7 and 9,
			// as a rule: the two workers take turns) is acked: its
			// writes went before its acks on its one connection.
			// A kill between the record write that ends the run and
			// the writes that follow it (the marker of the run's
			// running entry, its count shard) leaves CountRuns off
			// until a listing and the scheduler's hourly recount
			// repair it (kvstore's doc, "Run indexes";
			// TestCountsCrashAfterEndingCommit), which the index check
			// below cannot wait for.
			waitDrained(t, f)
			if _, err := f.store.Checkpoint(ctx, "claim-0046", 6); err != nil {
				t.Fatalf("claim-0046 completed without checkpoint 6: %v", err)
			}
			if !f.killHung("claim-0046", 6) {
				t.Fatal("claim-0046 step 6 was committed but no worker is hanging in it")
			}
			// One run at a time: a worker that dies takes its other
			// in-flight steps with it, and their redelivery would skip
			// their own first-delivery fault.
			for i, id := range crashRuns[:4] {
				if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: "claim", RunID: id}); err != nil {
					t.Fatal(err)
				}
				f.drive([]string{id}, 2*time.Minute, nil)
				if got := f.waitKills(i+2, 10*time.Second); got != i+2 {
					t.Errorf("after %s: %d workers killed, want %d", id, got, i+2)
				}
			}

			pays := listPayments(t, f)
			for _, id := range crashRuns {
				checkClaim(t, f, id, pays)
			}
			if r := pays["claim-0042:step6"].Requests; r != 1 {
				t.Errorf("claim-0042: step 6 presented its payment key %d times, want 1 (never re-executed)", r)
			}
			if r := pays["claim-0043:step6"].Requests; r != 2 {
				t.Errorf("claim-0043: payment key presented %d times, want 2 (crash after the effect)", r)
			}
			v, err := f.client.Inspect(ctx, "claim-0043")
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Effects) != 1 || !v.Effects[0].Replayed {
				t.Errorf("claim-0043 effects %+v, want one replayed", v.Effects)
			}
			if cp, _ := f.store.Checkpoint(ctx, "claim-0042", 7); cp.Attempt < 2 {
				t.Errorf("claim-0042 step 7 attempt %d, want a redelivery", cp.Attempt)
			}
			if cp, _ := f.store.Checkpoint(ctx, "claim-0046", 6); cp.Attempt < 2 {
				t.Errorf("claim-0046 step 6 committed by attempt %d, want the second worker's", cp.Attempt)
			}
			waitDrained(t, f)

			// Acceptance 3 at process level: replay the whole step stream.
			before := snapshot(t, f)
			nc, js := f.nats.Connect(t)
			n := testenv.RepublishSteps(t, js)
			nc.Close()
			t.Logf("republished %d step messages", n)
			waitDrained(t, f)
			if after := snapshot(t, f); after != before {
				t.Errorf("replaying the stream changed state:\nbefore %s\nafter  %s", before, after)
			}
			// The run index agrees with the records after the kills.
			if problems, err := fleetcheck.Index(ctx, f.store, crashRuns); err != nil || len(problems) > 0 {
				t.Errorf("run index after the crashes: %v %v", err, problems)
			}
			f.stopAll()
		})
	}
}

func listPayments(t testing.TB, f *fleet) map[string]payments.Payment {
	t.Helper()
	list, err := payments.Client{BaseURL: f.payURL}.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]payments.Payment{}
	for _, p := range list {
		if _, dup := byKey[p.Key]; dup {
			t.Errorf("two payments with key %s", p.Key)
		}
		byKey[p.Key] = p
	}
	return byKey
}

// checkClaim asserts a completed claim: checkpoints 1..9, one payment of 1840.
func checkClaim(t testing.TB, f *fleet, id string, pays map[string]payments.Payment) {
	t.Helper()
	ctx := context.Background()
	run, err := f.store.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != checkpoint.StatusCompleted {
		t.Errorf("%s: status %s (%s)", id, run.Status, run.Error)
	}
	cps, err := f.store.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 9 {
		t.Errorf("%s: %d checkpoints, want 9", id, len(cps))
	}
	for i, cp := range cps {
		if cp.Step != i+1 {
			t.Errorf("%s: checkpoint %d has step %d", id, i+1, cp.Step)
		}
	}
	n := 0
	for _, p := range pays {
		if p.RunID == id {
			n++
			if p.Amount != 1840 || p.Key != id+":step6" {
				t.Errorf("%s: payment %+v", id, p)
			}
		}
	}
	if n != 1 {
		t.Errorf("%s: %d payments, want 1", id, n)
	}
}

// waitDrained waits until the claim workers' consumer has nothing pending
// or unacked.
func waitDrained(t testing.TB, f *fleet) { waitDrainedOf(t, f, "claim") }

// waitDrainedOf waits until the consumer of workflow has nothing pending
// or unacked.
func waitDrainedOf(t testing.TB, f *fleet, workflow string) {
	t.Helper()
	nc, js := f.nats.Connect(t)
	defer nc.Close()
	testenv.Eventually(t, 60*time.Second, "step consumer drained", func() bool {
		c, err := js.Consumer(context.Background(), queue.StepStream, queue.ConsumerName(workflow))
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// snapshot renders everything a replay must not change.
func snapshot(t testing.TB, f *fleet) string {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for _, id := range crashRuns {
		run, err := f.store.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		cps, err := f.store.Checkpoints(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = map[string]any{"status": run.Status, "step": run.Step, "rev": run.Rev, "checkpoints": cps}
	}
	out["payments"] = listPayments(t, f)
	b, _ := json.Marshal(out)
	return string(b)
}
