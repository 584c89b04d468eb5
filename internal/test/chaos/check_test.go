package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// report is what a chaos run found: the invariants fleetcheck checks, and
// the suite's own figures.
type report struct {
	*fleetcheck.Report
	fleetcheck.Queue
	form           string
	seed           int64
	claims, agents int
	fanouts        int
	batches        int
	shipments      int
	runs           int // planned, children included
	faults         map[string]int
	lostCommits    int // commits lost to another writer, from the worker logs
	zombieLines    []string
	exits          []proc.Exit
	startRetries   int64
	decideStatus   map[int]int
	decideErrors   int
	signalStatus   map[int]int
	signalErrors   int
	wall, chaos    time.Duration
	settle         time.Duration
}

// expected is what a planned run must end with: a claim pays 1840 EUR
// once under its step-6 key, after an approval through the API at step 5;
// an agent run pays nothing.
func expected(r plannedRun) fleetcheck.Run {
	fr := fleetcheck.Run{ID: r.id, Workflow: r.workflow, Steps: r.steps}
	switch r.workflow {
	case "claim":
		fr.PayKey, fr.Amount, fr.Currency, fr.PaidAt = r.id+":step6", 1840, "EUR", 6
		fr.Approval = &fleetcheck.Approval{By: adjuster, Channel: "api", Step: 5}
	case "fanout":
		// Each branch pays 1 EUR under <run>:step2.<i>.
		fr.PayKey, fr.Amount, fr.Currency, fr.Branches = r.id+":step2", 1, "EUR", fanoutBranches
	}
	return fr
}

// check reads every planned run, its checkpoints and the payments, and
// collects what is wrong. A run may end dead or failed with its reason.
func check(ctx context.Context, e *env, runs []plannedRun, accepted map[string][]fleetcheck.Decision) (*fleetcheck.Report, error) {
	var want []fleetcheck.Run
	for _, r := range runs {
		want = append(want, expected(r))
	}
	return fleetcheck.Check(ctx, e.store, e.payURL, want, fleetcheck.Options{AllowEnded: true, Accepted: accepted, CheckRun: checkState})
}

// checkState checks what a completed run keeps in its state: a claim's
// payment, a fan-out's sum, a batch's sum of what its children paid, a
// shipment's signal.
func checkState(r fleetcheck.Run, run checkpoint.Run, cps []checkpoint.Checkpoint, pays []payments.Payment) []string {
	if r.Workflow == "claim" {
		return checkPaidClaim(r, run, cps, pays)
	}
	if run.Status != checkpoint.StatusCompleted || len(cps) == 0 {
		return nil
	}
	var st struct {
		Paid      int64          `json:"paid"`
		Ended     map[string]int `json:"ended"`
		Delivered struct {
			Run string `json:"run"`
		} `json:"delivered"`
	}
	if err := json.Unmarshal(cps[len(cps)-1].State, &st); err != nil {
		return []string{fmt.Sprintf("last state: %v", err)}
	}
	switch {
	case r.Workflow == "fanout" && st.Paid != fanoutBranches:
		return []string{fmt.Sprintf("fan-out paid %d, want %d (one per branch)", st.Paid, fanoutBranches)}
	case r.Workflow == "claims-batch" && st.Paid != 1840*int64(st.Ended["completed"]):
		return []string{fmt.Sprintf("batch paid %d with %d children completed, want %d", st.Paid, st.Ended["completed"], 1840*st.Ended["completed"])}
	case r.Workflow == "claims-batch" && sumValues(st.Ended) != batchChildren:
		return []string{fmt.Sprintf("batch saw %v children end, want %d", st.Ended, batchChildren)}
	case r.Workflow == "shipment" && st.Delivered.Run != r.ID:
		return []string{fmt.Sprintf("shipment kept the signal of %q", st.Delivered.Run)}
	}
	return nil
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// checkPaidClaim: the step that paid records the payment the provider
// holds, and who approved it.
func checkPaidClaim(r fleetcheck.Run, _ checkpoint.Run, cps []checkpoint.Checkpoint, pays []payments.Payment) []string {
	if r.PaidAt == 0 || len(cps) < r.PaidAt || len(pays) != 1 {
		return nil
	}
	var st struct {
		PaymentID  string `json:"payment_id"`
		ApprovedBy string `json:"approved_by"`
	}
	var problems []string
	if err := json.Unmarshal(cps[r.PaidAt-1].State, &st); err != nil || st.PaymentID != pays[0].ID {
		problems = append(problems, fmt.Sprintf("step %d recorded payment %q, the provider holds %s", r.PaidAt, st.PaymentID, pays[0].ID))
	}
	if st.ApprovedBy != adjuster {
		problems = append(problems, fmt.Sprintf("paid with approved_by %q, want %s", st.ApprovedBy, adjuster))
	}
	return problems
}

func (r *report) faultTotal() int {
	n := 0
	for _, v := range r.faults {
		n += v
	}
	return n
}

// print writes the summary table.
func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\ndurable chaos summary (%s form, seed %d)\n", r.form, r.seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string, a ...any) { fmt.Fprintf(tw, "  %s\t"+v+"\n", append([]any{k}, a...)...) }
	row("runs", "%d (%d claims, %d agent runs, %d fan-outs of %d branches, %d batches of %d child claims, %d shipments waiting for a signal): %d completed, %d dead, %d failed, %d other",
		r.runs, r.claims, r.agents, r.fanouts, fanoutBranches, r.batches, batchChildren, r.shipments, r.Completed, r.Dead, r.Failed, r.Other)
	row("faults injected", "%d: %d worker SIGKILLs, %d nats-server SIGKILL+restarts, %d redis-server SIGKILL+restarts, %d worker SIGSTOPs past the ack wait, %d redis-server SIGSTOPs",
		r.faultTotal(), r.faults[faultKillWorker], r.faults[faultRestartNATS], r.faults[faultRestartRedis], r.faults[faultStopWorker], r.faults[faultPauseRedis])
	row("resumes", "%d steps committed by a redelivery (attempt > 1) in %d runs; %d resumes after approval", r.ResumedSteps, r.ResumedRuns, r.ApprovalResumes)
	row("replays", "%d effects replayed (Idempotent-Replayed or journal), %d journaled calls replayed, %d payment keys presented more than once", r.EffectsReplayed, r.CallsReplayed, r.KeysPresentedAgain)
	row("lost commits", "%d (a second writer of a step lost to the first and followed it)", r.lostCommits)
	row("approvals", "%d accepted by the API, %d decisions on the runs, %d audited", r.DecisionsAccepted, r.DecisionsRecorded, r.DecisionsAudited)
	row("payments", "%d (one per claim that reached step 6, one per fan-out branch)", r.Payments)
	row("unacked", "%d pending, %d ack pending on the step consumers", r.Pending, r.AckPending)
	row("duplicates", "%d (must be 0)", r.Duplicates)
	row("lost", "%d (must be 0)", len(r.Unfinished))
	row("step failures", "%d counted against retry budgets by infrastructure faults (must be 0)", len(r.StepFailures))
	row("other violations", "%d", len(r.Problems))
	row("unexpected exits", "%d (processes that ended without being killed)", len(r.exits))
	row("time", "%s in all: %s of faults, %s to settle", r.wall.Round(time.Second), r.chaos.Round(time.Second), r.settle.Round(time.Second))
	tw.Flush()
	fleetcheck.PrintList(w, "lost runs", r.Unfinished)
	fleetcheck.PrintList(w, "violations", r.Problems)
	fleetcheck.PrintList(w, "dead or failed runs", r.Ended)
	fleetcheck.PrintList(w, "step failures counted", r.StepFailures)
	fleetcheck.PrintList(w, "zombies", r.zombieLines)
	var exits []string
	for _, x := range r.exits {
		exits = append(exits, x.String())
	}
	fleetcheck.PrintList(w, "unexpected exits", exits)
	fmt.Fprintf(w, "decision requests: %s; %d without an answer; %d run starts retried\n", statuses(r.decideStatus), r.decideErrors, r.startRetries)
	fmt.Fprintf(w, "signal requests: %s (404: sent before the run existed); %d without an answer\n", statuses(r.signalStatus), r.signalErrors)
}

// statuses renders HTTP status counts: "3×200, 1×404".
func statuses(m map[int]int) string {
	var st []string
	for code, n := range m {
		st = append(st, fmt.Sprintf("%d×%d", n, code))
	}
	sort.Strings(st)
	return strings.Join(st, ", ")
}
