// Package fleetcheck checks what durable promises once a fleet under
// faults has run its load (the chaos suite, internal/test/chaos, and the fleet
// test, internal/test/fleet): every run ended as it must with checkpoints 1..n,
// no step failure charged to a retry budget by the infrastructure, one
// payment per key and none under a key no run owns, every decision on its
// run and in its audit, and nothing left pending or unacknowledged in the
// step consumers. It reads the store, the payments API and JetStream; the
// suites assert on the Report and print it in their summaries.
package fleetcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/durable-run/durable/internal/demo/payments"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// Run is a run a suite started and what it must end with.
type Run struct {
	ID       string
	Workflow string
	// Steps is the number of checkpoints of the run once completed; 0:
	// any.
	Steps int
	// PayKey is the idempotency key of the one payment the run makes, ""
	// when it makes none. Amount and Currency ("" for any) are what it
	// pays.
	PayKey   string
	Amount   int64
	Currency string
	// Branches, when set, makes the run pay once under each of the keys
	// PayKey.1 … PayKey.<Branches> (a fan-out's branches) instead of once
	// under PayKey.
	Branches int
	// PaidAt is the step that pays: a run with that many checkpoints has
	// paid, one with fewer has not. 0: only a completed run must have paid.
	PaidAt int
	// Approval, when set, is the decision the run waits for: a run that
	// completed or paid must hold an approval that matches it.
	Approval *Approval
}

// Approval is a decision a run must hold: approved, and by, through and
// at what it says (empty fields match any).
type Approval struct {
	By      string
	Channel string
	Step    int
}

func (a Approval) matches(got checkpoint.Approval) bool {
	return got.Approved() && (a.By == "" || got.By == a.By) && (a.Channel == "" || got.Channel == a.Channel) && (a.Step == 0 || got.Step == a.Step)
}

// Decision is one decision an API accepted (answered 200) on a run.
type Decision struct {
	By     string
	Step   int
	SHA256 string
}

// Options shape a check.
type Options struct {
	// AllowEnded lets a run end dead or failed, with its reason recorded;
	// without it every run must complete.
	AllowEnded bool
	// Accepted are the decisions an API accepted, by run: each must be
	// on its run.
	Accepted map[string][]Decision
	// CheckRun adds a suite's own checks of a run: the problems it finds.
	CheckRun func(r Run, run checkpoint.Run, cps []checkpoint.Checkpoint, pays []payments.Payment) []string
}

// Report is what a check found. The lists are what is wrong, each entry
// naming its run; the counts are the summary's figures.
type Report struct {
	// Statuses counts the runs by workflow and status ("missing": no run
	// record).
	Statuses map[string]map[checkpoint.Status]int
	// Completed, Dead and Failed count the runs that ended so; Other the
	// rest (not ended, or ended without a reason, or cancelled).
	Completed, Dead, Failed, Other int
	// Unfinished are the runs that did not end as they must.
	Unfinished []string
	// Ended are the runs that ended dead, failed or cancelled, with their
	// reasons.
	Ended []string
	// Problems are broken invariants: checkpoints, payments, decisions.
	Problems []string
	// StepFailures are failures counted against a step's retry budget; the
	// suites' steps never fail on their own, so each came from the
	// infrastructure, which must not use up a step's attempts.
	StepFailures []string

	Payments           int // made, under any key
	KeysPresentedAgain int // payment keys presented more than once (replayed by the provider)
	Duplicates         int // payments beyond one per key

	Checkpoints     int         // committed
	Commits         []time.Time // every checkpoint's commit time, in order
	LastCommit      time.Time
	ResumedSteps    int // checkpoints committed by a redelivery (attempt > 1)
	ResumedRuns     int // runs with such a checkpoint
	ApprovalResumes int // resumes after a decision
	EffectsReplayed int // effects whose key the provider (or the journal) had seen
	CallsReplayed   int // journaled calls read back instead of made again

	DecisionsRecorded int // decisions on the runs
	DecisionsAudited  int // of those, with their audit entry
	DecisionsAccepted int // decisions an API accepted
}

// Check reads every run of runs, its checkpoints and failures, and the
// payments API at paymentsURL, and reports what it found.
func Check(ctx context.Context, store checkpoint.Store, paymentsURL string, runs []Run, opts Options) (*Report, error) {
	rep := &Report{Statuses: map[string]map[checkpoint.Status]int{}}
	pays, err := payments.Client{BaseURL: paymentsURL}.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list payments: %w", err)
	}
	rep.Payments = len(pays)
	byRun, byKey := map[string][]payments.Payment{}, map[string][]payments.Payment{}
	for _, p := range pays {
		byRun[p.RunID] = append(byRun[p.RunID], p)
		byKey[p.Key] = append(byKey[p.Key], p)
		if p.Requests > 1 {
			rep.KeysPresentedAgain++
		}
	}
	owned := map[string]bool{} // payment ids that belong to a planned run
	for _, r := range runs {
		// A run's payments: those for its id, and those under its key.
		var mine []payments.Payment
		for _, p := range append(byRun[r.ID], byKey[r.PayKey]...) {
			if r.Branches > 0 && p.RunID != r.ID {
				continue // a branch key belongs to the run through its RunID
			}
			if (r.PayKey == "" && p.RunID != r.ID) || seen(mine, p) {
				continue
			}
			mine = append(mine, p)
			owned[p.ID] = true
		}
		if err := checkRun(ctx, store, r, mine, opts, rep); err != nil {
			return nil, fmt.Errorf("check %s: %w", r.ID, err)
		}
	}
	for _, p := range pays {
		if !owned[p.ID] {
			rep.Problems = append(rep.Problems, fmt.Sprintf("payment %s (key %s) for unknown run %q", p.ID, p.Key, p.RunID))
		}
	}
	sort.Slice(rep.Commits, func(i, j int) bool { return rep.Commits[i].Before(rep.Commits[j]) })
	return rep, nil
}

func seen(list []payments.Payment, p payments.Payment) bool {
	for _, q := range list {
		if q.ID == p.ID {
			return true
		}
	}
	return false
}

func checkRun(ctx context.Context, store checkpoint.Store, r Run, pays []payments.Payment, opts Options, rep *Report) error {
	if rep.Statuses[r.Workflow] == nil {
		rep.Statuses[r.Workflow] = map[checkpoint.Status]int{}
	}
	run, err := store.GetRun(ctx, r.ID)
	if errors.Is(err, checkpoint.ErrNotFound) {
		rep.Statuses[r.Workflow]["missing"]++
		rep.Unfinished = append(rep.Unfinished, r.ID+": no run record")
		rep.Other++
		return nil
	}
	if err != nil {
		return err
	}
	c := runCheck{r: r, run: run, opts: opts, rep: rep}
	c.status()
	if c.cps, err = store.Checkpoints(ctx, r.ID); err != nil {
		return err
	}
	c.checkpoints()
	if err := c.failures(ctx, store); err != nil {
		return err
	}
	c.payments(pays)
	c.decisions()
	if opts.CheckRun != nil {
		for _, p := range opts.CheckRun(r, run, c.cps, pays) {
			c.problem("%s", p)
		}
	}
	return nil
}

// runCheck checks one run and adds what it finds to rep.
type runCheck struct {
	r    Run
	run  checkpoint.Run
	cps  []checkpoint.Checkpoint
	opts Options
	rep  *Report
}

func (c *runCheck) problem(format string, a ...any) {
	c.rep.Problems = append(c.rep.Problems, c.r.ID+": "+fmt.Sprintf(format, a...))
}

// completed and paid: the run ended well; its payment is due.
func (c *runCheck) completed() bool { return c.run.Status == checkpoint.StatusCompleted }
func (c *runCheck) paid() bool {
	return c.completed() || (c.r.PaidAt > 0 && len(c.cps) >= c.r.PaidAt)
}

// status counts the run by how it ended, or lists it as unfinished.
func (c *runCheck) status() {
	r, run, opts, rep := c.r, c.run, c.opts, c.rep
	rep.Statuses[r.Workflow][run.Status]++
	where := fmt.Sprintf("%s at step %d (%s)", run.Status, run.Step, run.StepName)
	switch {
	case run.Status == checkpoint.StatusCompleted:
		rep.Completed++
	case !run.Status.Terminal():
		rep.Other++
		rep.Unfinished = append(rep.Unfinished, fmt.Sprintf("%s: %s, last change %s (%s ago)", r.ID, where, run.UpdatedAt.Format("15:04:05.000"), time.Since(run.UpdatedAt).Round(time.Second)))
	case run.Error == "":
		rep.Other++
		rep.Unfinished = append(rep.Unfinished, fmt.Sprintf("%s: %s with no reason recorded", r.ID, where))
	default:
		switch run.Status {
		case checkpoint.StatusDead:
			rep.Dead++
		case checkpoint.StatusFailed:
			rep.Failed++
		default:
			rep.Other++
		}
		rep.Ended = append(rep.Ended, fmt.Sprintf("%s %s: %s", r.ID, where, run.Error))
		if !opts.AllowEnded {
			rep.Unfinished = append(rep.Unfinished, fmt.Sprintf("%s: %s: %s", r.ID, where, run.Error))
		}
	}
	rep.ApprovalResumes += run.Resumes
}

// checkpoints checks that checkpoints 1..n were each written once: a
// zombie that advanced a run another worker had advanced would leave a
// gap, a second payment or a run record behind its checkpoints.
func (c *runCheck) checkpoints() {
	r, run, cps, rep, problem := c.r, c.run, c.cps, c.rep, c.problem
	resumed := false
	for i, cp := range cps {
		if cp.Step != i+1 {
			problem("checkpoint %d of %d is step %d: not contiguous", i+1, len(cps), cp.Step)
			break
		}
		if cp.Attempt > 1 {
			rep.ResumedSteps++
			resumed = true
		}
		for _, ef := range cp.Effects {
			if ef.Replayed {
				rep.EffectsReplayed++
			}
		}
		for _, c := range cp.Journal {
			if c.Replayed {
				rep.CallsReplayed++
			}
		}
		rep.Commits = append(rep.Commits, cp.At)
		if rep.LastCommit.Before(cp.At) {
			rep.LastCommit = cp.At
		}
	}
	rep.Checkpoints += len(cps)
	if resumed {
		rep.ResumedRuns++
	}
	switch {
	case run.Status == checkpoint.StatusCompleted && r.Steps > 0 && len(cps) != r.Steps:
		problem("completed with %d checkpoints, want %d", len(cps), r.Steps)
	case run.Status == checkpoint.StatusCompleted && (len(cps) == 0 || cps[len(cps)-1].Status != checkpoint.StatusCompleted || cps[len(cps)-1].Step != run.Step):
		problem("completed at step %d but its checkpoints end at %d", run.Step, len(cps))
	case run.Status != checkpoint.StatusCompleted && run.Status.Terminal() && run.Status != checkpoint.StatusFailed && len(cps) >= run.Step:
		problem("%s at step %d with %d checkpoints", run.Status, run.Step, len(cps))
	}
}

// failures collects the recorded failures of every step.
func (c *runCheck) failures(ctx context.Context, store checkpoint.Store) error {
	r, cps, rep := c.r, c.cps, c.rep
	for n := 1; n <= len(cps)+1; n++ {
		snap, err := store.Load(ctx, r.ID, checkpoint.AtStep(n))
		if err != nil {
			return err
		}
		for _, f := range snap.Failures {
			rep.StepFailures = append(rep.StepFailures, fmt.Sprintf("%s:%d attempt %d: %s", r.ID, n, f.Attempt, f.Error))
		}
	}
	return nil
}

// payments checks exactly one payment under the run's key, of what it pays.
func (c *runCheck) payments(pays []payments.Payment) {
	r, cps, rep, problem := c.r, c.cps, c.rep, c.problem
	completed, paid := c.completed(), c.paid()
	if r.Branches > 0 {
		c.branchPayments(pays)
		return
	}
	switch {
	case r.PayKey == "" && len(pays) > 0:
		problem("%d payments for a run that pays nothing", len(pays))
	case r.PayKey == "":
	case len(pays) > 1:
		rep.Duplicates += len(pays) - 1
		var ids []string
		for _, p := range pays {
			ids = append(ids, p.ID+" key "+p.Key)
		}
		problem("DUPLICATE: %d payments: %v", len(pays), ids)
	case len(pays) == 0 && paid:
		problem("%s without a payment under %s", map[bool]string{true: "completed", false: fmt.Sprintf("step %d committed", r.PaidAt)}[completed], r.PayKey)
	case len(pays) == 1 && r.PaidAt > 0 && len(cps) < r.PaidAt && completed:
		problem("paid but step %d has no checkpoint", r.PaidAt)
	}
	for _, p := range pays {
		if r.PayKey != "" && (p.Key != r.PayKey || p.RunID != r.ID || p.Amount != r.Amount || (r.Currency != "" && p.Currency != r.Currency)) {
			problem("payment %s: key %s for run %s, %d %s; want key %s for %s, %d %s", p.ID, p.Key, p.RunID, p.Amount, p.Currency, r.PayKey, r.ID, r.Amount, r.Currency)
		}
	}
}

// branchPayments checks at most one payment under each branch's key, all
// of them once the run completed, each of what the run pays.
func (c *runCheck) branchPayments(pays []payments.Payment) {
	r, rep, problem := c.r, c.rep, c.problem
	byKey := map[string][]payments.Payment{}
	for _, p := range pays {
		byKey[p.Key] = append(byKey[p.Key], p)
		if p.Amount != r.Amount || (r.Currency != "" && p.Currency != r.Currency) {
			problem("payment %s under %s: %d %s, want %d %s", p.ID, p.Key, p.Amount, p.Currency, r.Amount, r.Currency)
		}
	}
	for i := 1; i <= r.Branches; i++ {
		key := fmt.Sprintf("%s.%d", r.PayKey, i)
		switch n := len(byKey[key]); {
		case n > 1:
			rep.Duplicates += n - 1
			problem("DUPLICATE: %d payments under %s", n, key)
		case n == 0 && c.completed():
			problem("completed without a payment under %s", key)
		}
		delete(byKey, key)
	}
	for key, ps := range byKey {
		problem("%d payments under %s, which is no branch's key", len(ps), key)
	}
}

// decisions checks the decision the run waits for, and that every
// decision is audited: who, which payload.
func (c *runCheck) decisions() {
	r, run, opts, rep, problem := c.r, c.run, c.opts, c.rep, c.problem
	completed, paid := c.completed(), c.paid()
	if a := r.Approval; a != nil && paid {
		found := false
		for _, got := range run.Approvals {
			found = found || a.matches(got)
		}
		if !found {
			problem("%s without the decision it waits for (approved by %q through %q at step %d): %+v", map[bool]string{true: "completed", false: "paid"}[completed], a.By, a.Channel, a.Step, run.Approvals)
		}
	}
	for _, a := range run.Approvals {
		rep.DecisionsRecorded++
		found := false
		for _, au := range run.Audit {
			if au.Kind == checkpoint.AuditDecision && au.Step == a.Step && au.By == a.By && au.By != "" &&
				au.PayloadSHA256 == a.PayloadSHA256 && au.PayloadSHA256 != "" && au.Decision == a.Decision && au.Channel == a.Channel {
				found = true
				break
			}
		}
		if found {
			rep.DecisionsAudited++
		} else {
			problem("decision %s by %s on %s at step %d is not in the audit", a.Decision, a.By, a.PayloadSHA256, a.Step)
		}
	}
	for _, d := range opts.Accepted[r.ID] {
		rep.DecisionsAccepted++
		found := false
		for _, a := range run.Approvals {
			found = found || (a.Step == d.Step && a.By == d.By && a.PayloadSHA256 == d.SHA256)
		}
		if !found {
			problem("the API accepted a decision on %s at step %d that the run does not hold", d.SHA256, d.Step)
		}
	}
}

// PrintList writes a report's list as "title (n):" and the first 20
// items, one per line; nothing when items is empty.
func PrintList(w io.Writer, title string, items []string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(w, "%s (%d):\n", title, len(items))
	for i, s := range items {
		if i == 20 {
			fmt.Fprintf(w, "  ... %d more\n", len(items)-20)
			break
		}
		fmt.Fprintf(w, "  %s\n", s)
	}
}
