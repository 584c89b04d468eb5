package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// DefaultStatsSample is how many of the most recently updated runs Stats
// reads checkpoints from.
const DefaultStatsSample = 1000

// StatsOptions configures Stats.
type StatsOptions struct {
	// Sample is how many runs, the most recently updated first, have their
	// checkpoints read for the checkpoint-based figures (effects, resumes,
	// sizes, step durations). Default DefaultStatsSample; negative reads
	// every run.
	Sample int
	// StuckAfter is the stuck threshold (IsStuck); default DefaultStuckAfter.
	StuckAfter time.Duration
	// Parallel is how many runs' checkpoints are read at once; default 16.
	Parallel int
	// Now is the time of the figures; default time.Now().
	Now time.Time
}

// Stats are the four signals that durable execution is broken, for the
// fleet at one moment: duplicate side effects, resume rate, stuck runs and
// checkpoint size. Figures from run records cover every run; figures from
// checkpoints and from ended runs cover Sample.
type Stats struct {
	At       time.Time                 `json:"at"`
	Runs     int                       `json:"runs"`
	ByStatus map[checkpoint.Status]int `json:"by_status"`
	Sample   StatsSample               `json:"sample"`

	Duplicates  DuplicateStats  `json:"duplicates"`
	Resumes     ResumeStats     `json:"resumes"`
	Stuck       StuckStats      `json:"stuck"`
	PastTTL     int             `json:"waiting_past_ttl"`
	Checkpoints CheckpointStats `json:"checkpoints"`
}

// StatsSample says which runs the figures read: every live run, and of
// the ended ones the newest Sample of each ended status (Ended, which the
// figures from ended runs cover: resumes by approvals and signals, journal
// mismatches); the checkpoints of the Runs most recently updated of those.
type StatsSample struct {
	Runs        int  `json:"runs"`
	Checkpoints int  `json:"checkpoints"`
	Ended       int  `json:"ended_runs_read"`
	All         bool `json:"all"`
}

// DuplicateStats is what the store can tell about duplicate side effects.
// The store cannot see a provider executing an effect twice: that shows
// only in the provider's own records. What it can see:
type DuplicateStats struct {
	// Effects counts the effects committed in the sample.
	Effects int `json:"effects"`
	// Replayed counts effects whose provider (or the journal) answered
	// with an earlier result: an attempt performed the effect and did not
	// commit, and the idempotency key stopped the second execution.
	Replayed int `json:"replayed_effects"`
	// ReusedKeys counts effect keys committed by more than one checkpoint
	// in the sample (two steps or runs presenting one key): a provider that
	// honours keys returned the first result to the second step, one that
	// does not executed twice. Either way a bug in how keys are chosen.
	ReusedKeys int `json:"reused_keys"`
	// ReusedKeyExamples lists up to 10 of them.
	ReusedKeyExamples []string `json:"reused_key_examples,omitempty"`
	// JournalMismatches counts dead runs (of the sample) that died because a
	// step replayed a journaled call with different arguments.
	JournalMismatches int `json:"journal_mismatches"`
}

// ResumeStats: how often steps had to be taken up again.
type ResumeStats struct {
	// CompletedRuns is the number of completed runs in the sample.
	CompletedRuns int `json:"completed_runs"`
	// RedeliveredSteps counts the checkpoints of those runs committed by
	// an attempt after the first (a crash, an ack-wait timeout or a failed
	// attempt came before).
	RedeliveredSteps int `json:"redelivered_steps"`
	// PerCompletedRun is RedeliveredSteps / CompletedRuns: the resume rate.
	PerCompletedRun float64 `json:"per_completed_run"`
	// ApprovalResumes sums Run.Resumes over the sampled completed runs, and
	// ApprovalResumesPerCompletedRun divides it by them. Despite the name
	// (kept: it is the JSON field operators read), it counts every resume
	// of a parked run by an approval decision or a signal, or by the
	// expiry of its wait for one; not timers, not child runs ending.
	ApprovalResumes                int     `json:"approval_resumes"`
	ApprovalResumesPerCompletedRun float64 `json:"approval_resumes_per_completed_run"`
}

// StuckStats counts stuck runs (IsStuck) among all runs.
type StuckStats struct {
	Count int    `json:"count"`
	After string `json:"after"`
	// OldestRun and OldestSince name the stuck run idle the longest.
	OldestRun   string    `json:"oldest_run,omitempty"`
	OldestSince time.Time `json:"oldest_since,omitzero"`
	Examples    []string  `json:"examples,omitempty"`
}

// CheckpointStats are checkpoint sizes (bytes of the stored document) and
// step durations over the sample.
type CheckpointStats struct {
	Count     int     `json:"count"`
	P50Bytes  int     `json:"p50_bytes"`
	P95Bytes  int     `json:"p95_bytes"`
	MaxBytes  int     `json:"max_bytes"`
	Largest   string  `json:"largest,omitempty"` // run:step of the largest
	P50StepMS float64 `json:"p50_step_ms"`
	P95StepMS float64 `json:"p95_step_ms"`
}

// Stats computes the fleet's signals now. It reads the store's counters
// (runs per status), every live run (running and waiting: stuck runs,
// waits past their TTL) and, of the ended runs, the newest Sample of each
// ended status; the checkpoints of the Sample most recently updated of
// those it read. What it reads grows with the live work and the sample,
// not with the history the store keeps.
func (c *Client) Stats(ctx context.Context, o StatsOptions) (Stats, error) {
	o = o.withDefaults()
	counts, err := c.store.CountRuns(ctx)
	if err != nil {
		return Stats{}, fmt.Errorf("count runs: %w", err)
	}
	st := Stats{At: o.Now.UTC(), Runs: int(counts.Total()), ByStatus: map[checkpoint.Status]int{}}
	// Every status is present, zero or not, so scripts can index it.
	for _, s := range checkpoint.Statuses() {
		st.ByStatus[s] = int(counts.Status[s])
	}
	var runs []checkpoint.Run
	for _, s := range checkpoint.Statuses() {
		var read []checkpoint.Run
		if s.Terminal() {
			read, err = c.newest(ctx, s, o.Sample)
		} else {
			read, err = c.store.ListRuns(ctx, checkpoint.Filter{Status: s})
		}
		if err != nil {
			return Stats{}, fmt.Errorf("list %s runs: %w", s, err)
		}
		if s.Terminal() {
			st.Sample.Ended += len(read)
		}
		runs = append(runs, read...)
	}
	st.Stuck.After = o.StuckAfter.String()
	st.addRuns(runs, o)

	sample := mostRecent(runs, o.Sample)
	st.Sample.Runs, st.Sample.All = len(sample), int64(len(sample)) == counts.Total()
	cps, err := c.readCheckpoints(ctx, sample, o.Parallel)
	if err != nil {
		return Stats{}, err
	}
	st.addCheckpoints(sample, cps)
	return st, nil
}

// newest reads the newest n runs in status (every one when n is
// negative), a page at a time.
func (c *Client) newest(ctx context.Context, status checkpoint.Status, n int) ([]checkpoint.Run, error) {
	var runs []checkpoint.Run
	q := checkpoint.PageQuery{Status: status, Limit: checkpoint.MaxPageLimit}
	for n < 0 || len(runs) < n {
		if n > 0 {
			q.Limit = min(checkpoint.MaxPageLimit, n-len(runs))
		}
		page, err := c.store.PageRuns(ctx, q)
		if err != nil {
			return nil, err
		}
		runs = append(runs, page.Runs...)
		if page.Next.IsZero() {
			break
		}
		q.After = page.Next
	}
	return runs, nil
}

func (o StatsOptions) withDefaults() StatsOptions {
	if o.Sample == 0 {
		o.Sample = DefaultStatsSample
	}
	if o.StuckAfter <= 0 {
		o.StuckAfter = DefaultStuckAfter
	}
	if o.Parallel <= 0 {
		o.Parallel = 16
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	return o
}

// addRuns counts the figures taken from run records, over the runs read.
func (st *Stats) addRuns(runs []checkpoint.Run, o StatsOptions) {
	mismatch := steps.ErrJournalMismatch.Error()
	completed := 0
	for _, r := range runs {
		switch {
		case r.Status == checkpoint.StatusCompleted:
			completed++
			st.Resumes.ApprovalResumes += r.Resumes
		case r.Status == checkpoint.StatusDead && strings.Contains(r.Error, mismatch):
			// The stored error is the only record of why the run died.
			st.Duplicates.JournalMismatches++
		case IsPastTTL(r, o.Now):
			st.PastTTL++
		case IsStuck(r, o.Now, o.StuckAfter):
			st.Stuck.Count++
			if st.Stuck.OldestRun == "" || r.UpdatedAt.Before(st.Stuck.OldestSince) {
				st.Stuck.OldestRun, st.Stuck.OldestSince = r.ID, r.UpdatedAt
			}
			if len(st.Stuck.Examples) < 10 {
				st.Stuck.Examples = append(st.Stuck.Examples, r.ID)
			}
		}
	}
	if completed > 0 {
		st.Resumes.ApprovalResumesPerCompletedRun = float64(st.Resumes.ApprovalResumes) / float64(completed)
	}
}

// mostRecent returns the n most recently updated of runs (all of them when
// n is negative), the most recent first.
func mostRecent(runs []checkpoint.Run, n int) []checkpoint.Run {
	sample := slices.Clone(runs)
	sort.SliceStable(sample, func(i, j int) bool { return sample[i].UpdatedAt.After(sample[j].UpdatedAt) })
	if n > 0 && len(sample) > n {
		sample = sample[:n]
	}
	return sample
}

// addCheckpoints counts the figures taken from checkpoints: cps[i] are the
// checkpoints of sample[i].
func (st *Stats) addCheckpoints(sample []checkpoint.Run, cps [][]checkpoint.Checkpoint) {
	var sizes []int
	var durs []float64
	keyUses := map[string]int{}
	for i, r := range sample {
		for _, cp := range cps[i] {
			st.Sample.Checkpoints++
			b := CheckpointBytes(cp)
			sizes = append(sizes, b)
			if b > st.Checkpoints.MaxBytes {
				st.Checkpoints.MaxBytes, st.Checkpoints.Largest = b, fmt.Sprintf("%s:%d", r.ID, cp.Step)
				if cp.Branch > 0 {
					st.Checkpoints.Largest += fmt.Sprintf(".%d", cp.Branch)
				}
			}
			durs = append(durs, cp.DurationMS)
			for _, e := range cp.Effects {
				st.Duplicates.Effects++
				if e.Replayed {
					st.Duplicates.Replayed++
				}
				keyUses[e.Key]++
			}
			if r.Status == checkpoint.StatusCompleted && cp.Attempt > 1 {
				st.Resumes.RedeliveredSteps++
			}
		}
		if r.Status == checkpoint.StatusCompleted {
			st.Resumes.CompletedRuns++
		}
	}
	st.Duplicates.ReusedKeys, st.Duplicates.ReusedKeyExamples = reusedKeys(keyUses)
	if st.Resumes.CompletedRuns > 0 {
		st.Resumes.PerCompletedRun = float64(st.Resumes.RedeliveredSteps) / float64(st.Resumes.CompletedRuns)
	}
	st.Checkpoints.Count = len(sizes)
	slices.Sort(sizes)
	slices.Sort(durs)
	st.Checkpoints.P50Bytes, st.Checkpoints.P95Bytes = quantile(sizes, 0.50), quantile(sizes, 0.95)
	st.Checkpoints.P50StepMS, st.Checkpoints.P95StepMS = quantile(durs, 0.50), quantile(durs, 0.95)
}

// reusedKeys counts the keys used more than once, and returns the first
// 10 of them in order.
func reusedKeys(uses map[string]int) (int, []string) {
	n := 0
	var examples []string
	for k, u := range uses {
		if u > 1 {
			n++
			examples = append(examples, k)
		}
	}
	sort.Strings(examples)
	if len(examples) > 10 {
		examples = examples[:10]
	}
	return n, examples
}

// readCheckpoints reads the checkpoints of runs, parallel at a time, with
// those of the branches of their fan-outs: a branch's effects, replays and
// redeliveries count as a step's. A run deleted since it was listed has
// none.
func (c *Client) readCheckpoints(ctx context.Context, runs []checkpoint.Run, parallel int) ([][]checkpoint.Checkpoint, error) {
	out := make([][]checkpoint.Checkpoint, len(runs))
	errs := make([]error, len(runs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, len(runs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = c.withBranches(ctx, runs[i].ID)
				if errors.Is(errs[i], checkpoint.ErrNotFound) {
					out[i], errs[i] = nil, nil
				}
			}
		}()
	}
	for i := range runs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("checkpoints of %s: %w", runs[i].ID, err)
		}
	}
	return out, nil
}

// withBranches reads the checkpoints of run id and, after each fan-out's,
// its branches' committed checkpoints.
func (c *Client) withBranches(ctx context.Context, id string) ([]checkpoint.Checkpoint, error) {
	cps, err := c.store.Checkpoints(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]checkpoint.Checkpoint, 0, len(cps))
	for _, cp := range cps {
		out = append(out, cp)
		if cp.FanOut == nil || len(cp.FanOut.Branches) == 0 {
			continue
		}
		branches, err := c.store.BranchCheckpoints(ctx, id, cp.Step+1, len(cp.FanOut.Branches))
		if err != nil {
			return nil, err
		}
		out = append(out, branches...)
	}
	return out, nil
}

// quantile of sorted xs by the nearest-rank method; zero when empty.
func quantile[T int | float64](xs []T, q float64) T {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
