package fleet

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/internal/proc"
	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
	"github.com/durable-run/durable/pkg/client"
)

// report is what the fleet test found: the invariants fleetcheck checks,
// and the test's own figures.
type report struct {
	*fleetcheck.Report
	fleetcheck.Queue
	logHits    map[string]int // marker -> lines in the services' logs
	crossSlot  []string
	exits      []proc.Exit
	start      time.Time // first start
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
// payments: every run completed, paid once under its key, and a run that
// waits for a decision holds the test's approval.
func check(ctx context.Context, f *Fleet, runs []plannedRun) (*fleetcheck.Report, error) {
	var want []fleetcheck.Run
	for _, r := range runs {
		fr := fleetcheck.Run{ID: r.id, Workflow: r.workflow, Steps: r.steps, PayKey: r.payKey, Amount: r.amount}
		if r.workflow == "claim" {
			fr.PaidAt = 6
		}
		if r.decide {
			fr.Approval = &fleetcheck.Approval{By: decider, Channel: client.ChannelAPI}
		}
		want = append(want, fr)
	}
	return fleetcheck.Check(ctx, f.Store, f.PaymentsURL, want, fleetcheck.Options{})
}

// logMarkers are what the services' logs are searched for: CROSSSLOT must
// never appear (a script touching two slots); the others count how often
// a fault was felt, and healed.
var logMarkers = []string{"CROSSSLOT", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "connection refused", "i/o timeout",
	"context deadline exceeded", "nats: timeout", "no responders", "transient error", `"level":"error"`}

func scanLogs(f *Fleet, rep *report) {
	rep.logHits = map[string]int{}
	for _, s := range f.Services() {
		fleetcheck.ScanLogs(s.Logs(), func(_ string, _ int64, b []byte) {
			line := string(b)
			for _, m := range logMarkers {
				if strings.Contains(line, m) {
					rep.logHits[m]++
					if m == "CROSSSLOT" && len(rep.crossSlot) < 10 {
						rep.crossSlot = append(rep.crossSlot, s.Name()+": "+line)
					}
				}
			}
		})
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
	return len(r.Unfinished) > 0 || len(r.Problems) > 0 || r.Duplicates > 0 || len(r.crossSlot) > 0 || len(r.StepFailures) > 0 ||
		r.Pending > 0 || r.AckPending > 0 || r.DeadLetters > 0 || len(r.exits) > 0 || len(r.faultErrs) > 0
}

// print writes the summary table.
func (r *report) print(w io.Writer) {
	took := r.LastCommit.Sub(r.start)
	fmt.Fprintf(w, "\ndurable fleet summary (%s)\n", r.topology)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string, a ...any) { fmt.Fprintf(tw, "  %s\t"+v+"\n", append([]any{k}, a...)...) }
	var wfs []string
	for wf := range r.Statuses {
		wfs = append(wfs, wf)
	}
	sort.Strings(wfs)
	for _, wf := range wfs {
		var parts []string
		total := 0
		for st, n := range r.Statuses[wf] {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
			total += n
		}
		sort.Strings(parts)
		row("runs "+wf, "%d: %s", total, strings.Join(parts, ", "))
	}
	row("payments", "%d (one per claim and refund); %d keys presented more than once (replayed by the provider); %d duplicates (must be 0)", r.Payments, r.KeysPresentedAgain, r.Duplicates)
	row("steps", "%d checkpoints; %d committed by a redelivery (attempt > 1) in %d runs; %d resumes after a decision", r.Checkpoints, r.ResumedSteps, r.ResumedRuns, r.ApprovalResumes)
	row("decisions", "%d taken by the test through pkg/client; %d attempts refused or failed (retried)", r.decided, sumInts(r.decideErrs))
	row("starts", "%d retried while a server was away; the test's Redis client logged %d failed dials", r.startRetry, r.clientLog)
	row("time", "first start to last checkpoint %s", took.Round(100*time.Millisecond))
	if took > 0 {
		row("throughput", "%.1f steps/s over that span (load paced, not a maximum)", float64(r.Checkpoints)/took.Seconds())
	}
	row("consumers", "%d pending, %d unacked; %d dead letters", r.Pending, r.AckPending, r.DeadLetters)
	row("step failures", "%d counted against retry budgets (must be 0)", len(r.StepFailures))
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
			fmt.Fprintf(w, "  longest pause in checkpoint commits within 20s of the %s kill: %s\n", k, longestPause(r.Commits, at, 20*time.Second).Round(10*time.Millisecond))
		}
	}
	fleetcheck.PrintList(w, "fault errors", r.faultErrs)
	fleetcheck.PrintList(w, "runs not completed", r.Unfinished)
	fleetcheck.PrintList(w, "violations", r.Problems)
	fleetcheck.PrintList(w, "step failures counted", r.StepFailures)
	fleetcheck.PrintList(w, "CROSSSLOT lines", r.crossSlot)
	var exits []string
	for _, x := range r.exits {
		exits = append(exits, x.String())
	}
	fleetcheck.PrintList(w, "unexpected exits", exits)
	fleetcheck.PrintList(w, "start errors", countLines(r.startErrs))
	fleetcheck.PrintList(w, "decision errors", countLines(r.decideErrs))
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
