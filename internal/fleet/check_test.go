package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/internal/payments"
	"github.com/durable-run/durable/internal/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// report is what the fleet test found.
type report struct {
	runs       map[string]map[checkpoint.Status]int // workflow -> status -> runs
	notDone    []string                             // runs not completed
	problems   []string                             // broken invariants
	payments   int
	replayed   int // payment keys presented more than once
	duplicates int // payments beyond one per key
	steps      int // checkpoints committed
	resumed    int // checkpoints committed by a redelivery (attempt > 1)
	resumedIn  int // runs with such a checkpoint
	decisions  int // approval resumes (Run.Resumes)
	failures   []string
	commits    []time.Time // every checkpoint's commit time
	pending    uint64
	ackPending uint64
	dlq        uint64
	logHits    map[string]int // marker -> lines in the services' logs
	crossSlot  []string
	exits      []Exit
	start, end time.Time // first start, last checkpoint
	startRetry int64
	startErrs  map[string]int64
	clientLog  int64 // go-redis log lines of the test's own client
	decided    int
	decideErrs map[string]int
	faults     []faultEvent
	faultErrs  []string
	kills      map[string]time.Time
	topology   string
}

// check reads every planned run, its checkpoints and failures, and the
// payments, and records what is wrong.
func check(ctx context.Context, f *Fleet, runs []plannedRun, rep *report) error {
	rep.runs = map[string]map[checkpoint.Status]int{}
	pays, err := payments.Client{BaseURL: f.PaymentsURL}.List(ctx)
	if err != nil {
		return fmt.Errorf("list payments: %w", err)
	}
	rep.payments = len(pays)
	byKey := map[string][]payments.Payment{}
	for _, p := range pays {
		byKey[p.Key] = append(byKey[p.Key], p)
		if p.Requests > 1 {
			rep.replayed++
		}
	}
	keys := map[string]bool{}
	for _, r := range runs {
		keys[r.payKey] = true
		if err := checkRun(ctx, f, r, byKey[r.payKey], rep); err != nil {
			return fmt.Errorf("check %s: %w", r.id, err)
		}
	}
	for _, p := range pays {
		if !keys[p.Key] {
			rep.problems = append(rep.problems, fmt.Sprintf("payment %s under unknown key %s", p.ID, p.Key))
		}
	}
	return nil
}

func checkRun(ctx context.Context, f *Fleet, r plannedRun, pays []payments.Payment, rep *report) error {
	problem := func(format string, a ...any) {
		rep.problems = append(rep.problems, r.id+": "+fmt.Sprintf(format, a...))
	}
	if rep.runs[r.workflow] == nil {
		rep.runs[r.workflow] = map[checkpoint.Status]int{}
	}
	run, err := f.Store.GetRun(ctx, r.id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		rep.runs[r.workflow]["missing"]++
		rep.notDone = append(rep.notDone, r.id+": no run record")
		return nil
	}
	if err != nil {
		return err
	}
	rep.runs[r.workflow][run.Status]++
	if run.Status != checkpoint.StatusCompleted {
		rep.notDone = append(rep.notDone, fmt.Sprintf("%s: %s at step %d (%s) %s, last change %s", r.id, run.Status, run.Step, run.StepName, run.Error, run.UpdatedAt.Format("15:04:05.000")))
	}
	rep.decisions += run.Resumes
	cps, err := f.Store.Checkpoints(ctx, r.id)
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
			rep.resumed++
			resumed = true
		}
		rep.commits = append(rep.commits, cp.At)
		if rep.end.Before(cp.At) {
			rep.end = cp.At
		}
	}
	rep.steps += len(cps)
	if resumed {
		rep.resumedIn++
	}
	if run.Status == checkpoint.StatusCompleted {
		switch {
		case r.steps > 0 && len(cps) != r.steps:
			problem("completed with %d checkpoints, want %d", len(cps), r.steps)
		case len(cps) == 0 || cps[len(cps)-1].Status != checkpoint.StatusCompleted || cps[len(cps)-1].Step != run.Step:
			problem("completed at step %d but its checkpoints end at %d", run.Step, len(cps))
		}
	}
	// The steps never fail on their own here: a failure counted against a
	// step's retry budget came from the infrastructure, which must not use
	// up a step's attempts.
	for n := 1; n <= len(cps)+1; n++ {
		snap, err := f.Store.Load(ctx, r.id, n)
		if err != nil {
			return err
		}
		for _, fl := range snap.Failures {
			rep.failures = append(rep.failures, fmt.Sprintf("%s:%d attempt %d: %s", r.id, n, fl.Attempt, fl.Error))
		}
	}
	// Exactly one payment under the step's key, of the planned amount.
	switch {
	case len(pays) > 1:
		rep.duplicates += len(pays) - 1
		problem("DUPLICATE: %d payments under %s", len(pays), r.payKey)
	case len(pays) == 0 && run.Status == checkpoint.StatusCompleted:
		problem("completed without a payment under %s", r.payKey)
	}
	for _, p := range pays {
		if p.Amount != r.amount || p.RunID != r.id {
			problem("payment %s: %d for run %s, want %d for %s", p.ID, p.Amount, p.RunID, r.amount, r.id)
		}
	}
	if r.decide && run.Status == checkpoint.StatusCompleted && len(run.Approvals) == 0 {
		problem("completed without the decision it waits for")
	}
	return nil
}

// consumers sums the pending and unacknowledged messages of every
// consumer of the step stream, and counts the dead letters.
func consumers(ctx context.Context, f *Fleet) (pending, ackPending, dlq uint64, err error) {
	st, err := f.JS.Stream(ctx, queue.StepStream)
	if err != nil {
		return 0, 0, 0, err
	}
	names := st.ConsumerNames(ctx)
	for name := range names.Name() {
		c, err := st.Consumer(ctx, name)
		if err != nil {
			return 0, 0, 0, err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		pending += info.NumPending
		ackPending += uint64(info.NumAckPending)
	}
	if err := names.Err(); err != nil {
		return 0, 0, 0, err
	}
	d, err := f.JS.Stream(ctx, queue.DLQStream)
	if err != nil {
		return 0, 0, 0, err
	}
	info, err := d.Info(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return pending, ackPending, info.State.Msgs, nil
}

// logMarkers are what the services' logs are searched for: CROSSSLOT must
// never appear (a script touching two slots); the others count how often
// a fault was felt, and healed.
var logMarkers = []string{"CROSSSLOT", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "connection refused", "i/o timeout",
	"context deadline exceeded", "nats: timeout", "no responders", "transient error", `"level":"error"`}

func scanLogs(f *Fleet, rep *report) {
	rep.logHits = map[string]int{}
	for _, s := range f.Services() {
		for _, path := range s.Logs() {
			fh, err := os.Open(path)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(fh)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				for _, m := range logMarkers {
					if strings.Contains(line, m) {
						rep.logHits[m]++
						if m == "CROSSSLOT" && len(rep.crossSlot) < 10 {
							rep.crossSlot = append(rep.crossSlot, s.Name+": "+line)
						}
					}
				}
			}
			fh.Close()
		}
		rep.exits = append(rep.exits, s.Exits()...)
	}
}

// longestPause is the longest gap between two checkpoint commits in
// [from, from+window]: how long the fleet stood still after a fault.
func longestPause(commits []time.Time, from time.Time, window time.Duration) time.Duration {
	var longest time.Duration
	prev := from
	for _, c := range commits {
		if c.Before(from) {
			continue
		}
		if c.After(from.Add(window)) {
			break
		}
		if d := c.Sub(prev); d > longest {
			longest = d
		}
		prev = c
	}
	return longest
}

func (r *report) failed() bool {
	return len(r.notDone) > 0 || len(r.problems) > 0 || r.duplicates > 0 || len(r.crossSlot) > 0 || len(r.failures) > 0 ||
		r.pending > 0 || r.ackPending > 0 || r.dlq > 0 || len(r.exits) > 0 || len(r.faultErrs) > 0
}

// print writes the summary table.
func (r *report) print(w io.Writer) {
	sort.Slice(r.commits, func(i, j int) bool { return r.commits[i].Before(r.commits[j]) })
	took := r.end.Sub(r.start)
	fmt.Fprintf(w, "\ndurable fleet summary (%s)\n", r.topology)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string, a ...any) { fmt.Fprintf(tw, "  %s\t"+v+"\n", append([]any{k}, a...)...) }
	var wfs []string
	for wf := range r.runs {
		wfs = append(wfs, wf)
	}
	sort.Strings(wfs)
	for _, wf := range wfs {
		var parts []string
		total := 0
		for st, n := range r.runs[wf] {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
			total += n
		}
		sort.Strings(parts)
		row("runs "+wf, "%d: %s", total, strings.Join(parts, ", "))
	}
	row("payments", "%d (one per claim and refund); %d keys presented more than once (replayed by the provider); %d duplicates (must be 0)", r.payments, r.replayed, r.duplicates)
	row("steps", "%d checkpoints; %d committed by a redelivery (attempt > 1) in %d runs; %d resumes after a decision", r.steps, r.resumed, r.resumedIn, r.decisions)
	row("decisions", "%d taken by the test through pkg/client; %d attempts refused or failed (retried)", r.decided, sumInts(r.decideErrs))
	row("starts", "%d retried while a server was away; the test's Redis client logged %d failed dials", r.startRetry, r.clientLog)
	row("time", "first start to last checkpoint %s", took.Round(100*time.Millisecond))
	if took > 0 {
		row("throughput", "%.1f steps/s over that span (load paced, not a maximum)", float64(r.steps)/took.Seconds())
	}
	row("consumers", "%d pending, %d unacked; %d dead letters", r.pending, r.ackPending, r.dlq)
	row("step failures", "%d counted against retry budgets (must be 0)", len(r.failures))
	row("CROSSSLOT", "%d log lines (must be 0)", len(r.crossSlot))
	var hits []string
	for _, m := range logMarkers {
		if m != "CROSSSLOT" && r.logHits[m] > 0 {
			hits = append(hits, fmt.Sprintf("%s ×%d", m, r.logHits[m]))
		}
	}
	row("faults felt", "%s", strings.Join(hits, ", "))
	row("unexpected exits", "%d", len(r.exits))
	tw.Flush()
	fmt.Fprintln(w, "faults (time since the first start):")
	for _, e := range r.faults {
		fmt.Fprintf(w, "  +%6.1fs  %s\n", e.at.Sub(r.start).Seconds(), e.what)
	}
	for _, k := range []string{"nats", "redis", "worker"} {
		if at, ok := r.kills[k]; ok {
			fmt.Fprintf(w, "  longest pause in checkpoint commits within 20s of the %s kill: %s\n", k, longestPause(r.commits, at, 20*time.Second).Round(10*time.Millisecond))
		}
	}
	testenv.PrintList(w, "fault errors", r.faultErrs)
	testenv.PrintList(w, "runs not completed", r.notDone)
	testenv.PrintList(w, "violations", r.problems)
	testenv.PrintList(w, "step failures counted", r.failures)
	testenv.PrintList(w, "CROSSSLOT lines", r.crossSlot)
	var exits []string
	for _, x := range r.exits {
		exits = append(exits, fmt.Sprintf("%s (gen %d) %s at %s: %s", x.Proc, x.Gen, x.Status, x.At.Format("15:04:05.000"), strings.ReplaceAll(x.Tail, "\n", " | ")))
	}
	testenv.PrintList(w, "unexpected exits", exits)
	testenv.PrintList(w, "start errors", countLines(r.startErrs))
	testenv.PrintList(w, "decision errors", countLines(r.decideErrs))
}

func sumInts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func countLines[N int | int64](m map[string]N) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%d× %s", v, k))
	}
	sort.Strings(out)
	return out
}
