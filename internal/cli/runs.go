package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/service"
)

func cmdRunsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable runs list", stderr)
	var c service.Conn
	c.Register(fs)
	status := fs.String("status", "", "only runs in this status (running, waiting, completed, failed, cancelled, dead)")
	workflow := fs.String("workflow", "", "only runs of this workflow")
	olderThan := fs.Duration("older-than", 0, "only runs created more than this long ago (e.g. 24h)")
	newerThan := fs.Duration("newer-than", 0, "only runs created less than this long ago (e.g. 15m)")
	pastTTL := fs.Bool("past-ttl", false, "only waiting runs whose deadline (approval TTL or timer) has passed")
	stuck := fs.Bool("stuck", false, "only stuck runs: running with no commit for longer than --stuck-after")
	stuckAfter := fs.Duration("stuck-after", client.DefaultStuckAfter, "how long a running run may go without a commit before it counts as stuck (the scheduler's default)")
	limit := fs.Int("limit", 100, fmt.Sprintf("print at most this many runs, newest first (1-%d; 0: every run that matches, which costs what the store holds)", checkpoint.MaxPageLimit))
	cursor := fs.String("cursor", "", "start after the runs of an earlier listing (the cursor it printed on stderr)")
	asJSON := fs.Bool("json", false, "print a JSON array")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("runs list: unexpected argument %q", pos[0])
	}
	if *limit < 0 || *limit > checkpoint.MaxPageLimit {
		return service.Usagef("runs list: --limit %d: want 0-%d", *limit, checkpoint.MaxPageLimit)
	}
	after, err := checkpoint.ParseCursor(*cursor)
	if err != nil {
		return service.Usagef("runs list: --%v", err)
	}
	if *limit == 0 && !after.IsZero() {
		return service.Usagef("runs list: --cursor pages a listing: give --limit too")
	}
	if *status != "" && !checkpoint.Status(*status).Valid() {
		return service.Usagef("runs list: unknown status %q (running, waiting, completed, failed, cancelled, dead)", *status)
	}
	if *stuckAfter <= 0 {
		return service.Usagef("runs list: --stuck-after %s: want a positive duration, e.g. 5m", *stuckAfter)
	}
	f := client.ListFilter{Status: checkpoint.Status(*status), Workflow: *workflow, OlderThan: *olderThan, NewerThan: *newerThan,
		PastTTL: *pastTTL, Stuck: *stuck, StuckAfter: *stuckAfter, Now: time.Now()}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	var sums []client.RunSummary
	var next checkpoint.Cursor
	if *limit == 0 {
		sums, err = cl.List(ctx, f)
		slices.Reverse(sums) // newest first, as pages are
	} else {
		var page client.RunsPage
		page, err = cl.ListPage(ctx, f, *limit, after)
		sums, next = page.Runs, page.Next
	}
	if errors.Is(err, client.ErrBadFilter) {
		return service.Usagef("runs list: %v", err)
	}
	if err != nil {
		return err
	}
	if !next.IsZero() {
		defer fmt.Fprintf(stderr, "more runs: add --cursor %s\n", next)
	}
	if sums == nil {
		sums = []client.RunSummary{} // JSON [] for no runs
	}
	if *asJSON {
		return writeJSON(stdout, sums)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTATUS\tSTEP\tCREATED\tUPDATED\tNOTE")
	for _, r := range sums {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d %s\t%s\t%s\t%s\n", r.RunID, r.Workflow, r.Status, r.Step, r.StepName,
			r.CreatedAt.Local().Format(time.DateTime), r.UpdatedAt.Local().Format(time.DateTime), listNote(r, f.Now))
	}
	return tw.Flush()
}

func listNote(r client.RunSummary, now time.Time) string {
	switch {
	case r.Stuck:
		return "stuck: no commit for " + roundDur(now.Sub(r.UpdatedAt))
	case r.PastTTL:
		return "past its TTL by " + roundDur(now.Sub(*r.WaitDeadline))
	case r.WaitDeadline != nil:
		return "deadline " + r.WaitDeadline.Local().Format(time.DateTime)
	case r.Error != "":
		return "error: " + cut(r.Error, 200)
	}
	return ""
}

func cmdRunsShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable runs show", stderr)
	var c service.Conn
	c.Register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("runs show: want exactly one RUN")
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	v, err := cl.Inspect(ctx, pos[0])
	if err != nil {
		return missingRun(ctx, cl.Store(), pos[0], err)
	}
	if *asJSON {
		return writeJSON(stdout, v)
	}
	printRun(stdout, v)
	return nil
}

// printRun prints a run as a timeline: every committed step with the
// delivery that committed it, and the waits' audit entries between them.
func printRun(w io.Writer, v client.RunView) {
	printRunHeader(w, v)
	fmt.Fprintln(w, "\nTIMELINE")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tSTEP\tEVENT\tATTEMPT\tDURATION\tBYTES\tDETAIL")
	for _, e := range v.Timeline {
		at := e.At.Local().Format("01-02 15:04:05.000")
		if cp := e.Checkpoint; cp != nil {
			attempt := fmt.Sprint(cp.Attempt)
			if cp.Resumed {
				attempt += " resumed"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\n", at, cp.Step, cp.Name, attempt, fmtMS(cp.DurationMS), cp.Bytes, stepDetail(*cp, v))
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t\t\t\t%s\n", at, e.Step, strings.ToUpper(e.Kind), auditDetail(*e.Audit))
	}
	_ = tw.Flush()
	printBranches(w, v.Branches)
	printChildren(w, v.Children)
	printSignals(w, v.Signals)
	if len(v.PendingFailures) > 0 {
		last := v.PendingFailures[len(v.PendingFailures)-1]
		fmt.Fprintf(w, "step %d %s not committed: %d failed attempts recorded, last (attempt %d at %s): %s\n",
			v.Step, v.StepName, len(v.PendingFailures), last.Attempt, last.At.Local().Format(time.DateTime), cut(last.Error, 200))
	}

	printEffects(w, v.Effects)
	printApprovals(w, v.Approvals)
	fmt.Fprintln(w, "\nattempt N is the delivery of the step's message that committed it; \"resumed\" (N > 1): earlier deliveries crashed,\ntimed out, failed or were handed back for a rate limit, and the step ran again from the previous checkpoint.\nCommitted steps are never run again.")
}

// printRunHeader prints what the run is: its identity, input, parent,
// error, state and what it waits for.
func printRunHeader(w io.Writer, v client.RunView) {
	fmt.Fprintf(w, "run %s  workflow %s v%d  status %s  step %d %s\n", v.RunID, v.Workflow, v.Version, v.Status, v.Step, v.StepName)
	fmt.Fprintf(w, "created %s  updated %s  resumes %d (after a decision or a signal)", v.CreatedAt.Local().Format(time.DateTime), v.UpdatedAt.Local().Format(time.DateTime), v.Resumes)
	if v.Redrives > 0 {
		fmt.Fprintf(w, "  redrives %d", v.Redrives)
	}
	if v.StartedBy != "" {
		fmt.Fprintf(w, "  started by %s", v.StartedBy)
	}
	fmt.Fprintln(w)
	if len(v.Input) > 0 {
		fmt.Fprintf(w, "input %s\n", cutWhole(string(v.Input), 200, v.RunID))
	}
	if v.Parent != nil {
		fmt.Fprintf(w, "child of run %s, started by its step %d\n", v.Parent.RunID, v.Parent.Step)
	}
	if v.TraceID != "" {
		fmt.Fprintf(w, "trace %s\n", v.TraceID)
	}
	if v.Error != "" {
		fmt.Fprintf(w, "error: %s\n", v.Error)
	}
	if a := v.Archived; a != nil {
		fmt.Fprintf(w, "archived %s: retention purged the run from the store; this is its archive (%s/%s, %d bytes)", a.At.Local().Format(time.DateTime), a.Bucket, a.Object, a.Bytes)
		if a.Purged != nil {
			fmt.Fprintf(w, ", purged %s", a.Purged.PurgedAt.Local().Format(time.DateTime))
		}
		fmt.Fprintln(w)
	}
	if len(v.State) > 0 {
		fmt.Fprintf(w, "state %s\n", cutWhole(string(v.State), 1000, v.RunID))
	}
	for _, n := range stateNotices(v.State) {
		fmt.Fprintf(w, "notice: %s\n", cut(n, 200))
	}
	switch {
	case v.Wait != nil && v.Wait.Kind == checkpoint.WaitChildren:
		what := "its child runs to end"
		if kids := childrenOf(v.Children, v.Wait.Step-1); len(kids) > 0 {
			what = fmt.Sprintf("its %s to end, now %s", plural(len(kids), "child run", "child runs"), childTally(kids))
		}
		fmt.Fprintf(w, "waiting since %s for %s (step %d %s runs then)\n", v.Wait.Since.Local().Format(time.DateTime), what, v.Wait.Step, v.Wait.StepName)
	case v.Wait != nil && v.Wait.Kind == checkpoint.WaitSignal:
		fmt.Fprintf(w, "waiting since %s for signal %s, deadline %s (durable signal %s %s --data JSON)\n", v.Wait.Since.Local().Format(time.DateTime), v.Wait.Name, v.Wait.Deadline.Local().Format(time.DateTime), v.RunID, v.Wait.Name)
	case v.Wait != nil && v.Wait.Kind == checkpoint.WaitTimer:
		fmt.Fprintf(w, "sleeping since %s until %s (a durable timer; step %d %s runs then)\n", v.Wait.Since.Local().Format(time.DateTime), v.Wait.Deadline.Local().Format(time.DateTime), v.Wait.Step, v.Wait.StepName)
	case v.Wait != nil:
		fmt.Fprintf(w, "waiting since %s for group %s, deadline %s, payload sha256 %s\n  payload: %s\n",
			v.Wait.Since.Local().Format(time.DateTime), v.Wait.Group, v.Wait.Deadline.Local().Format(time.DateTime), v.Wait.PayloadSHA256, cutWhole(string(v.Wait.Payload), 200, v.RunID))
	}
}

// printEffects lists the run's side effects and why each ran once.
func printEffects(w io.Writer, effects []client.EffectView) {
	fmt.Fprintln(w, "\nEFFECTS")
	if len(effects) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, e := range effects {
		why := "performed by the committing attempt"
		if e.Replayed {
			why = "an earlier attempt had performed it; the key made the provider answer with the original result, nothing ran twice"
		}
		step := strconv.Itoa(e.Step)
		if e.Branch > 0 {
			step = fmt.Sprintf("%d, branch %d", e.Step, e.Branch)
		}
		fmt.Fprintf(w, "  effect %s (step %s) replayed=%t: %s\n", e.Key, step, e.Replayed, why)
	}
}

// printApprovals lists the run's decisions with the payload each saw.
func printApprovals(w io.Writer, approvals []checkpoint.Approval) {
	fmt.Fprintln(w, "\nAPPROVALS")
	if len(approvals) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, a := range approvals {
		reason := ""
		if a.Reason != "" {
			reason = " reason: " + a.Reason
		}
		fmt.Fprintf(w, "  decision %s by %s at %s via %s on step %d, payload sha256 %s%s\n", a.Decision, a.By, a.At.Local().Format(time.DateTime), a.Channel, a.Step, a.PayloadSHA256, reason)
		if len(a.Payload) > 0 {
			fmt.Fprintf(w, "    payload seen: %s\n", cut(string(a.Payload), 200))
		}
	}
}

// printSignals lists the signals delivered to the run.
func printSignals(w io.Writer, signals []checkpoint.Signal) {
	if len(signals) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSIGNALS")
	for _, s := range signals {
		state := "pending"
		if s.ConsumedBy > 0 {
			state = fmt.Sprintf("consumed by step %d", s.ConsumedBy)
		}
		if s.Expired {
			fmt.Fprintf(w, "  %s  wait for %s expired; %s\n", s.At.Local().Format(time.DateTime), s.Name, state)
			continue
		}
		size := fmt.Sprintf(", %d bytes", len(s.Data))
		if s.ConsumedBy > 0 && len(s.Data) == 0 {
			size = "" // a consumed signal's data is no longer kept
		}
		fmt.Fprintf(w, "  %s  %s (id %s) by %s via %s%s; %s\n", s.At.Local().Format(time.DateTime), s.Name, s.ID, s.By, s.Channel, size, state)
	}
}

// printChildren lists the child runs the run's steps started.
func printChildren(w io.Writer, children []client.ChildView) {
	if len(children) == 0 {
		return
	}
	fmt.Fprintln(w, "\nCHILDREN")
	for _, c := range children {
		what := string(c.Status)
		if c.Error != "" && what != "" {
			what += ": " + cut(c.Error, 120)
		} else if c.Error != "" { // not started: no status
			what = cut(c.Error, 120)
		}
		line := fmt.Sprintf("  %s (%s, started by step %d): %s", c.RunID, c.Workflow, c.Step, what)
		fmt.Fprintln(w, line)
	}
}

// printBranches lists the branches of the run's fan-outs: each one when
// there are few, else a count and the first branches not committed.
func printBranches(w io.Writer, branches []client.BranchView) {
	if len(branches) == 0 {
		return
	}
	fmt.Fprintln(w, "\nBRANCHES")
	const listed = 20
	byJoin := map[int][]client.BranchView{}
	var joins []int
	for _, b := range branches {
		if _, ok := byJoin[b.Step]; !ok {
			joins = append(joins, b.Step)
		}
		byJoin[b.Step] = append(byJoin[b.Step], b)
	}
	for _, join := range joins {
		bs := byJoin[join]
		var pending []string
		for _, b := range bs {
			if !b.Committed {
				pending = append(pending, strconv.Itoa(b.Branch))
			}
		}
		fmt.Fprintf(w, "  fan-out joined at step %d: %d of %d branches committed\n", join, len(bs)-len(pending), len(bs))
		if len(bs) > listed {
			if len(pending) > listed {
				pending = append(pending[:listed], "...")
			}
			if len(pending) > 0 {
				fmt.Fprintf(w, "    not committed: %s\n", strings.Join(pending, ", "))
			}
			continue
		}
		for _, b := range bs {
			if !b.Committed {
				fmt.Fprintf(w, "    %d.%d %s  not committed\n", b.Step, b.Branch, b.Name)
				continue
			}
			line := fmt.Sprintf("    %d.%d %s  attempt %d  %s  %d bytes", b.Step, b.Branch, b.Name, b.Attempt, fmtMS(b.DurationMS), b.Bytes)
			if ws := waits(b.Resource, b.SlotWaitMS, b.TokenResource, b.TokenWaitMS); len(ws) > 0 {
				line += "  " + strings.Join(ws, "; ")
			}
			fmt.Fprintln(w, line)
		}
	}
}

// stateNotices is the "notices" list of a run's state, if it has one:
// what a workflow says changed under the run (an agent loop: the model or
// its tools since the run started).
func stateNotices(state json.RawMessage) []string {
	var st struct {
		Notices []string `json:"notices"`
	}
	if len(state) == 0 || json.Unmarshal(state, &st) != nil {
		return nil
	}
	return st.Notices
}

// stepDetail says what a committed step of run v did beyond its row:
// effects, calls, why it took more than one delivery, and what the run
// did next.
func stepDetail(cp client.CheckpointView, v client.RunView) string {
	parts := waits(cp.Resource, cp.SlotWaitMS, cp.TokenResource, cp.TokenWaitMS)
	for _, e := range cp.Effects {
		if e.Replayed {
			parts = append(parts, "effect "+e.Key+" REPLAYED")
		} else {
			parts = append(parts, "effect "+e.Key)
		}
	}
	if len(cp.Journal) > 0 {
		names := make([]string, 0, len(cp.Journal))
		for _, c := range cp.Journal {
			n := c.Name
			if c.Note != "" {
				n += " [" + c.Note + "]"
			}
			if c.Replayed {
				n += " (replayed from the journal)"
			}
			names = append(names, n)
		}
		parts = append(parts, plural(len(names), "call", "calls")+" "+strings.Join(names, ", "))
	}
	if cp.Resumed {
		earlier := cp.Attempt - 1
		if n := len(cp.Failures); n > 0 {
			parts = append(parts, fmt.Sprintf("after %s, last: %s", plural(n, "failed attempt", "failed attempts"), cut(cp.Failures[n-1].Error, 80)))
			earlier -= n
		}
		why := "worker crashed or its ack wait ran out"
		if cp.TokenWaitMS > 0 {
			why = "handed back for tokens, or a worker crashed or its ack wait ran out"
		}
		if earlier > 0 {
			parts = append(parts, fmt.Sprintf("after %s that left no commit and no failure record (%s)", plural(earlier, "delivery", "deliveries"), why))
		}
	}
	if cp.FanOut > 0 {
		parts = append(parts, fmt.Sprintf("fanned out to %s, joined at step %d (%s)", plural(cp.FanOut, "branch", "branches"), cp.Step+1, cp.Next))
	}
	if cp.Status != "" && cp.Status != checkpoint.StatusRunning {
		parts = append(parts, afterStep(cp, v))
	}
	return strings.Join(parts, "; ")
}

// waits says what a step (or branch) waited for before it committed: a
// slot of resource's concurrency limit, tokens of tokenResource's rate
// limit.
func waits(resource string, slotMS float64, tokenResource string, tokenMS float64) []string {
	var parts []string
	if resource != "" {
		parts = append(parts, fmt.Sprintf("waited %s for a slot of %s", fmtMS(slotMS), resource))
	}
	if tokenResource != "" {
		parts = append(parts, fmt.Sprintf("waited up to %s for tokens of %s", fmtMS(tokenMS), tokenResource))
	}
	return parts
}

// afterStep says what run v did after step cp: "run completed", or, for a
// step that started child runs, how many and how they stand now.
func afterStep(cp client.CheckpointView, v client.RunView) string {
	kids := childrenOf(v.Children, cp.Step)
	if cp.Status != checkpoint.StatusWaiting || len(kids) == 0 {
		return "run " + string(cp.Status)
	}
	n := plural(len(kids), "child run", "child runs")
	if w := v.Wait; w != nil && w.Kind == checkpoint.WaitChildren && w.Step == cp.Step+1 {
		return fmt.Sprintf("run waiting for %s: %s", n, childTally(kids))
	}
	return fmt.Sprintf("started %s, now %s", n, childTally(kids))
}

// childrenOf are the child runs step n started.
func childrenOf(children []client.ChildView, n int) []client.ChildView {
	var out []client.ChildView
	for _, c := range children {
		if c.Step == n {
			out = append(out, c)
		}
	}
	return out
}

// childTally counts children by status: "1 completed, 2 running".
func childTally(children []client.ChildView) string {
	order := []checkpoint.Status{checkpoint.StatusCompleted, checkpoint.StatusRunning, checkpoint.StatusWaiting,
		checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead, ""}
	var parts []string
	for _, s := range order {
		n := 0
		for _, c := range children {
			if c.Status == s {
				n++
			}
		}
		if n == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d %s", n, cmp.Or(string(s), "not started")))
	}
	return strings.Join(parts, ", ")
}

func auditDetail(a checkpoint.AuditEntry) string {
	var parts []string
	who := string(a.Decision)
	if a.By != "" {
		who = strings.TrimSpace(who + " by " + a.By)
	}
	if a.Channel != "" {
		who = strings.TrimSpace(who + " via " + a.Channel)
	}
	if who != "" {
		parts = append(parts, who)
	}
	if a.Group != "" {
		parts = append(parts, "group "+a.Group)
	}
	if a.PayloadSHA256 != "" {
		parts = append(parts, "payload sha256 "+a.PayloadSHA256)
	}
	if a.Reason != "" {
		parts = append(parts, "reason: "+cut(a.Reason, 80))
	}
	return strings.Join(parts, ", ")
}

// plural is "1 call" or "n calls".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func fmtMS(ms float64) string {
	if ms >= 1000 {
		return fmt.Sprintf("%.2fs", ms/1000)
	}
	return fmt.Sprintf("%.1fms", ms)
}

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Minute:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// cutWhole is cut, saying how to see all of s: state and payloads are
// what an operator reads a run for.
func cutWhole(s string, n int, run string) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s (cut at %d of %d bytes; `durable runs show %s --json` shows it whole)", cut(s, n), n, len(s), run)
}

// cut shortens s to n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
