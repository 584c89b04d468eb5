package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/service"
)

func cmdStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable stats", stderr)
	var c service.Conn
	c.Register(fs)
	sample := fs.Int("sample", client.DefaultStatsSample, "read this many of the newest ended runs of each status, and the checkpoints of this many most recently updated runs (0 or less: all runs, which costs what the store holds)")
	stuckAfter := fs.Duration("stuck-after", client.DefaultStuckAfter, "a running run with no commit for this long is stuck (the scheduler's default)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("stats: unexpected argument %q", pos[0])
	}
	if *stuckAfter <= 0 {
		return service.Usagef("stats: --stuck-after %s: want a positive duration, e.g. 5m", *stuckAfter)
	}
	if *sample <= 0 {
		*sample = -1
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := cl.Stats(ctx, client.StatsOptions{Sample: *sample, StuckAfter: *stuckAfter})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, st)
	}
	printStats(stdout, st)
	return nil
}

func printStats(w io.Writer, st client.Stats) {
	scope := fmt.Sprintf("checkpoints of the %d most recently updated runs (%d checkpoints)", st.Sample.Runs, st.Sample.Checkpoints)
	if st.Sample.All {
		scope = fmt.Sprintf("checkpoints of all runs (%d checkpoints)", st.Sample.Checkpoints)
	}
	fmt.Fprintf(w, "durable stats at %s: %d runs (the index's counters); [sample] figures read every live run, the newest %d ended runs and the %s\n",
		st.At.Local().Format(time.DateTime), st.Runs, st.Sample.Ended, scope)
	fmt.Fprint(w, "runs by status:")
	for _, s := range []checkpoint.Status{checkpoint.StatusRunning, checkpoint.StatusWaiting, checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead} {
		fmt.Fprintf(w, "  %s %d", s, st.ByStatus[s])
	}
	fmt.Fprintln(w)

	d := st.Duplicates
	fmt.Fprintln(w, "\n1. duplicate side effects")
	fmt.Fprintf(w, "   reused effect keys   %d [sample]  keys committed by more than one checkpoint%s\n", d.ReusedKeys, examples(d.ReusedKeyExamples...))
	fmt.Fprintf(w, "   journal mismatches   %d [sample]  dead runs whose step replayed a recorded call with other arguments\n", d.JournalMismatches)
	fmt.Fprintf(w, "   replayed effects     %d of %d [sample]  an attempt that did not commit had made the effect; its key stopped a second execution\n", d.Replayed, d.Effects)
	fmt.Fprintln(w, "   not measured here: an effect a provider executed twice (see the provider's own records)")

	r := st.Resumes
	fmt.Fprintln(w, "\n2. resume rate")
	fmt.Fprintf(w, "   %.3f resumed steps per completed run [sample]: %s committed by a delivery after the first, in %s\n",
		r.PerCompletedRun, plural(r.RedeliveredSteps, "step", "steps"), plural(r.CompletedRuns, "completed run", "completed runs"))
	// Run.Resumes counts decisions and signals (and the expiry of a wait
	// for either), not timers or child runs: the JSON keeps its field
	// names (approval_resumes), the text says what they count.
	fmt.Fprintf(w, "   %.3f resumes (approvals and signals) per completed run [sample]: %s in the newest completed runs read, each a parked run woken by an approval decision or a signal, or by the expiry of its wait for one\n",
		r.ApprovalResumesPerCompletedRun, plural(r.ApprovalResumes, "resume", "resumes"))

	fmt.Fprintf(w, "\n3. stuck runs (running, no commit for more than %s)\n", st.Stuck.After)
	fmt.Fprintf(w, "   %d", st.Stuck.Count)
	if st.Stuck.OldestRun != "" {
		fmt.Fprintf(w, "; oldest %s, no commit since %s%s", st.Stuck.OldestRun, st.Stuck.OldestSince.Local().Format(time.DateTime), examples(st.Stuck.Examples...))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "   waiting past their TTL: %d (`durable runs list --past-ttl`)\n", st.PastTTL)

	c := st.Checkpoints
	fmt.Fprintf(w, "\n4. checkpoint size [sample, %d checkpoints]\n", c.Count)
	fmt.Fprintf(w, "   p50 %d B  p95 %d B  max %d B", c.P50Bytes, c.P95Bytes, c.MaxBytes)
	if c.Largest != "" {
		fmt.Fprintf(w, " (%s)", c.Largest)
	}
	fmt.Fprintf(w, "\n   step duration p50 %s  p95 %s\n", fmtMS(c.P50StepMS), fmtMS(c.P95StepMS))
}

func examples(xs ...string) string {
	if len(xs) == 0 {
		return ""
	}
	return ": " + strings.Join(xs, ", ")
}
