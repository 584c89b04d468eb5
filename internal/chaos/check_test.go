package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/internal/payments"
	"github.com/durable-run/durable/internal/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// report is what a chaos run found.
type report struct {
	form               string
	seed               int64
	claims, agents     int
	completed, dead    int
	failed, other      int
	deadReasons        []string
	lost               []string // runs not terminal, or terminal without a reason
	duplicates         int      // payments beyond the one per claim
	problems           []string // any other broken invariant
	resumedSteps       int      // checkpoints committed by a redelivery (attempt > 1)
	resumedRuns        int      // runs with at least one such checkpoint
	approvalResumes    int      // resumes after a decision
	effectsReplayed    int      // effects whose key the provider had seen (or the journal held)
	callsReplayed      int      // journaled calls read back instead of made again
	keysPresentedAgain int      // payment keys presented more than once
	payments           int
	stepFailures       []string // failures recorded against steps that never fail on their own
	decisionsAccepted  int      // decisions the API answered 200
	decisionsRecorded  int      // decisions on the runs
	decisionsAudited   int      // of those, with their audit entry
	pending            uint64
	ackPending         uint64
	faults             map[string]int
	lostCommits        int // commits lost to another writer, from the worker logs
	zombieLines        []string
	exits              []exit
	startRetries       int64
	decideStatus       map[int]int
	decideErrors       int
	wall, chaos        time.Duration
	settle             time.Duration
}

// check reads every planned run, its checkpoints and the payments, and
// collects what is wrong.
func check(ctx context.Context, e *env, runs []plannedRun, accepted map[string][]decision, rep *report) error {
	pays, err := payments.Client{BaseURL: e.payURL}.List(ctx)
	if err != nil {
		return fmt.Errorf("list payments: %w", err)
	}
	rep.payments = len(pays)
	byRun := map[string][]payments.Payment{}
	for _, p := range pays {
		byRun[p.RunID] = append(byRun[p.RunID], p)
		if p.Requests > 1 {
			rep.keysPresentedAgain++
		}
	}
	planned := map[string]bool{}
	for _, r := range runs {
		planned[r.id] = true
		if err := checkRun(ctx, e, r, byRun[r.id], accepted[r.id], rep); err != nil {
			return err
		}
	}
	for _, p := range pays {
		if !planned[p.RunID] {
			rep.problems = append(rep.problems, fmt.Sprintf("payment %s (key %s) for unknown run %q", p.ID, p.Key, p.RunID))
		}
	}
	return nil
}

func checkRun(ctx context.Context, e *env, r plannedRun, pays []payments.Payment, accepted []decision, rep *report) error {
	problem := func(format string, a ...any) {
		rep.problems = append(rep.problems, r.id+": "+fmt.Sprintf(format, a...))
	}
	run, err := e.store.GetRun(ctx, r.id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		rep.lost = append(rep.lost, r.id+": no run record")
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case !run.Status.Terminal():
		rep.lost = append(rep.lost, fmt.Sprintf("%s: %s at step %d (%s), last change %s ago", r.id, run.Status, run.Step, run.StepName, time.Since(run.UpdatedAt).Round(time.Second)))
		rep.other++
	case run.Status == checkpoint.StatusCompleted:
		rep.completed++
	case run.Error == "":
		rep.lost = append(rep.lost, fmt.Sprintf("%s: %s at step %d with no reason recorded", r.id, run.Status, run.Step))
		rep.other++
	case run.Status == checkpoint.StatusDead:
		rep.dead++
		rep.deadReasons = append(rep.deadReasons, fmt.Sprintf("%s at step %d: %s", r.id, run.Step, run.Error))
	case run.Status == checkpoint.StatusFailed:
		rep.failed++
		rep.deadReasons = append(rep.deadReasons, fmt.Sprintf("%s failed at step %d: %s", r.id, run.Step, run.Error))
	default:
		rep.other++
		rep.deadReasons = append(rep.deadReasons, fmt.Sprintf("%s %s at step %d: %s", r.id, run.Status, run.Step, run.Error))
	}
	rep.approvalResumes += run.Resumes

	// Checkpoints 1..n, each written once: a zombie that advanced a run
	// another worker had advanced would leave a gap, a second payment or a
	// run record behind its checkpoints.
	cps, err := e.store.Checkpoints(ctx, r.id)
	if err != nil {
		return err
	}
	resumed := false
	for i, cp := range cps {
		if cp.Step != i+1 {
			problem("checkpoint %d of %d is step %d: not contiguous", i+1, len(cps), cp.Step)
			break
		}
		if cp.Attempt > 1 {
			rep.resumedSteps++
			resumed = true
		}
		for _, ef := range cp.Effects {
			if ef.Replayed {
				rep.effectsReplayed++
			}
		}
		for _, c := range cp.Journal {
			if c.Replayed {
				rep.callsReplayed++
			}
		}
	}
	if resumed {
		rep.resumedRuns++
	}
	// The example steps never fail by themselves here (the payments API
	// and the claims system are never faulted): any failure counted
	// against a step's retry budget came from the infrastructure, and
	// store or broker outages must not use up a step's attempts.
	for n := 1; n <= len(cps)+1; n++ {
		snap, err := e.store.Load(ctx, r.id, n)
		if err != nil {
			return err
		}
		for _, f := range snap.Failures {
			rep.stepFailures = append(rep.stepFailures, fmt.Sprintf("%s:%d attempt %d: %s", r.id, n, f.Attempt, f.Error))
		}
	}
	if run.Status == checkpoint.StatusCompleted {
		if len(cps) != r.steps {
			problem("completed with %d checkpoints, want %d", len(cps), r.steps)
		} else if last := cps[len(cps)-1]; last.Status != checkpoint.StatusCompleted || run.Step != last.Step {
			problem("completed at step %d but its last checkpoint %d says %s", run.Step, last.Step, last.Status)
		}
	} else if run.Status.Terminal() && len(cps) >= run.Step && run.Status != checkpoint.StatusFailed {
		problem("%s at step %d with %d checkpoints", run.Status, run.Step, len(cps))
	}

	if r.workflow != "claim" {
		if len(pays) > 0 {
			problem("%d payments for an agent run", len(pays))
		}
		return nil
	}
	// Exactly one payment per claim, made with the step's key.
	paidStep := len(cps) >= 6
	switch {
	case len(pays) > 1:
		rep.duplicates += len(pays) - 1
		var ids []string
		for _, p := range pays {
			ids = append(ids, p.ID+" key "+p.Key)
		}
		problem("DUPLICATE: %d payments: %s", len(pays), strings.Join(ids, ", "))
	case len(pays) == 0 && paidStep:
		problem("step 6 committed but no payment was made")
	case len(pays) == 1 && !paidStep && run.Status == checkpoint.StatusCompleted:
		problem("paid but step 6 has no checkpoint")
	}
	for _, p := range pays {
		if p.Key != r.id+":step6" || p.Amount != 1840 || p.Currency != "EUR" {
			problem("payment %s: key %s amount %d %s, want key %s:step6 and 1840 EUR", p.ID, p.Key, p.Amount, p.Currency, r.id)
		}
	}
	if paidStep && len(pays) == 1 {
		var st struct {
			PaymentID  string `json:"payment_id"`
			ApprovedBy string `json:"approved_by"`
		}
		if err := json.Unmarshal(cps[5].State, &st); err != nil || st.PaymentID != pays[0].ID {
			problem("step 6 recorded payment %q, the provider holds %s", st.PaymentID, pays[0].ID)
		}
		if st.ApprovedBy != adjuster {
			problem("paid with approved_by %q, want %s", st.ApprovedBy, adjuster)
		}
	}

	// Every decision is on the run and audited: who, which payload.
	if paidStep {
		approved := false
		for _, a := range run.Approvals {
			if a.Decision == checkpoint.DecisionApproved && a.By == adjuster && a.Channel == "api" && a.Step == 5 {
				approved = true
			}
		}
		if !approved {
			problem("paid without an approval through the API at step 5: %+v", run.Approvals)
		}
	}
	for _, a := range run.Approvals {
		rep.decisionsRecorded++
		found := false
		for _, au := range run.Audit {
			if au.Kind == checkpoint.AuditDecision && au.Step == a.Step && au.By == a.By && au.By != "" &&
				au.PayloadSHA256 == a.PayloadSHA256 && au.PayloadSHA256 != "" && au.Decision == a.Decision && au.Channel == a.Channel {
				found = true
				break
			}
		}
		if found {
			rep.decisionsAudited++
		} else {
			problem("decision %s by %s on %s at step %d is not in the audit", a.Decision, a.By, a.PayloadSHA256, a.Step)
		}
	}
	for _, d := range accepted {
		rep.decisionsAccepted++
		found := false
		for _, a := range run.Approvals {
			if a.Step == d.step && a.By == adjuster && a.PayloadSHA256 == d.hash {
				found = true
			}
		}
		if !found {
			problem("the API accepted a decision on %s at step %d that the run does not hold", d.hash, d.step)
		}
	}
	return nil
}

// consumers returns the step consumers' pending and unacked messages.
func consumers(ctx context.Context, e *env) (pending, ackPending uint64, err error) {
	for _, wf := range []string{"claim", "agent-loop"} {
		c, err := e.js.Consumer(ctx, queue.StepStream, queue.ConsumerName(wf))
		if err != nil {
			return 0, 0, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		pending += info.NumPending
		ackPending += uint64(info.NumAckPending)
	}
	return pending, ackPending, nil
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
	row("runs", "%d (%d claims, %d agent runs): %d completed, %d dead, %d failed, %d other", r.claims+r.agents, r.claims, r.agents, r.completed, r.dead, r.failed, r.other)
	row("faults injected", "%d: %d worker SIGKILLs, %d nats-server SIGKILL+restarts, %d redis-server SIGKILL+restarts, %d worker SIGSTOPs past the ack wait, %d redis-server SIGSTOPs",
		r.faultTotal(), r.faults[faultKillWorker], r.faults[faultRestartNATS], r.faults[faultRestartRedis], r.faults[faultStopWorker], r.faults[faultPauseRedis])
	row("resumes", "%d steps committed by a redelivery (attempt > 1) in %d runs; %d resumes after approval", r.resumedSteps, r.resumedRuns, r.approvalResumes)
	row("replays", "%d effects replayed (Idempotent-Replayed or journal), %d journaled calls replayed, %d payment keys presented more than once", r.effectsReplayed, r.callsReplayed, r.keysPresentedAgain)
	row("lost commits", "%d (a second writer of a step lost to the first and followed it)", r.lostCommits)
	row("approvals", "%d accepted by the API, %d decisions on the runs, %d audited", r.decisionsAccepted, r.decisionsRecorded, r.decisionsAudited)
	row("payments", "%d (one per claim that reached step 6)", r.payments)
	row("unacked", "%d pending, %d ack pending on the step consumers", r.pending, r.ackPending)
	row("duplicates", "%d (must be 0)", r.duplicates)
	row("lost", "%d (must be 0)", len(r.lost))
	row("step failures", "%d counted against retry budgets by infrastructure faults (must be 0)", len(r.stepFailures))
	row("other violations", "%d", len(r.problems))
	row("unexpected exits", "%d (processes that ended without being killed)", len(r.exits))
	row("time", "%s in all: %s of faults, %s to settle", r.wall.Round(time.Second), r.chaos.Round(time.Second), r.settle.Round(time.Second))
	tw.Flush()
	testenv.PrintList(w, "lost runs", r.lost)
	testenv.PrintList(w, "violations", r.problems)
	testenv.PrintList(w, "dead or failed runs", r.deadReasons)
	testenv.PrintList(w, "step failures counted", r.stepFailures)
	testenv.PrintList(w, "zombies", r.zombieLines)
	var exits []string
	for _, x := range r.exits {
		exits = append(exits, fmt.Sprintf("%s (gen %d) %s at %s: %s", x.member, x.gen, x.status, x.at.Format("15:04:05.000"), strings.ReplaceAll(x.tail, "\n", " | ")))
	}
	testenv.PrintList(w, "unexpected exits", exits)
	var st []string
	for code, n := range r.decideStatus {
		st = append(st, fmt.Sprintf("%d×%d", n, code))
	}
	sort.Strings(st)
	fmt.Fprintf(w, "decision requests: %s; %d without an answer; %d run starts retried\n", strings.Join(st, ", "), r.decideErrors, r.startRetries)
}
