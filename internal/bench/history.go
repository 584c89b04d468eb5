package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/scheduler"
)

// The history phase (issue 24) measures what the runs a store keeps after
// they ended cost the work that is still going on. On each store it sets
// up live work: one real claims-9 run run to its end by a worker process
// (the template of an ended run), HistoryRunningRuns runs started and left
// queued (no worker runs them) and HistoryWaitingRuns bench-park runs
// parked at an approval that expires in an hour. It measures, against the
// store with that live work only (the "empty" store): one repair pass,
// the first page of runs (client.ListPage, and GET /api/runs through the
// approver's handler), one fleet gauge scan and a /metrics scrape, the
// waiting runs listed (`durable runs list --status waiting --limit 0`:
// every one, where the default --limit 100 reads a page) and the p50 of
// client.Start. Then it fills the store with N ended runs, each the
// template's record and nine checkpoints written straight through the
// store (checkpoint.Store.CreateRun and Commit: nine million steps through
// a worker, at ~10,000 steps/s on a bench machine, would take a quarter of
// an hour more and write the step and event streams too, which this phase
// leaves out), and measures the same again. Each figure is the median of historyRounds rounds after one
// round not counted; the ratios are after over before.
//
// A fill takes minutes, and the load of a shared machine moves meanwhile
// by more than the bound: a twin store on servers of its own (a second
// nats-server and redis-server), with the same live work and no history,
// is measured in the same rounds, so that the ratio to the twin shows
// what the history costs at one moment's load, what it does to the
// servers (a keyspace of ten million keys, a stream of gigabytes)
// included. The bound is checked on that ratio.

// Live work of the history phase, and the bounds of issue 24.
const (
	HistoryWaitingRuns = 1000
	HistoryRunningRuns = 100
	// HistoryRatioBound: every figure with N ended runs within this many
	// times its figure on the store with the live work only.
	HistoryRatioBound = 1.2
	// HistoryPurgeBound: runs purged per second per scheduler, once
	// purge exists (see measurePurge).
	HistoryPurgeBound = 5000
)

const (
	// historyRounds of each measure; every figure is their median.
	historyRounds = 31
	// historyStartsPerRound runs started one at a time per round (and
	// cancelled after it, so that the live work stays what it was).
	historyStartsPerRound = 10
	// historyStepsPerRound: the steps of the bench-linear run a round runs
	// to its end on the measured store (StepP50MS).
	historyStepsPerRound = 5
	// historyQuickReps: the figures of a millisecond (a page of runs) are
	// taken this many times per round.
	historyQuickReps = 5
	// historyPageLimit is the page the runs page and GET /api/runs ask for.
	historyPageLimit = 50
	// historyFillConcurrency is how many ended runs are written at once.
	historyFillConcurrency = 256
	// historySpan is how far back the ended runs' creations go: a month
	// of history, older than the live work, as a store holds it.
	historySpan = 30 * 24 * time.Hour
	// historyWaitTTL of the waiting runs' approvals: past the phase.
	historyWaitTTL = time.Hour
	// historyFill names how the ended runs are written.
	historyFill = "store"
)

// HistoryResult is what the history phase measured on one store.
type HistoryResult struct {
	System      string `json:"system"`
	EndedRuns   int    `json:"ended_runs"`
	WaitingRuns int    `json:"waiting_runs"`
	RunningRuns int    `json:"running_runs"`
	Rounds      int    `json:"rounds"`
	// Fill is how the ended runs were written: "store", each with
	// CreateRun and nine Commits of the template's record and
	// checkpoints, FillConcurrency at once.
	Fill            string     `json:"fill"`
	FillConcurrency int        `json:"fill_concurrency"`
	FillSeconds     float64    `json:"fill_s"`
	FillRunsPerS    float64    `json:"fill_runs_per_s"`
	FillCPU         CPUSeconds `json:"fill_cpu_s"`
	// SettleSeconds: after the fill, until the store was quiet again
	// (Redis: no AOF rewrite under way, its key table not being
	// rehashed) and the machine's dirty pages
	// were written back.
	SettleSeconds float64 `json:"settle_s"`
	// Template is what the real claims-9 run occupies in the store, and
	// Filled what the first ended run written by the fill does: they
	// should be alike (Redis: its keys and their MEMORY USAGE, without
	// its entries in the run index; KV: the bucket stream's growth).
	Template RunFootprint `json:"template_run"`
	Filled   RunFootprint `json:"filled_run"`
	// Empty is the store with the live work only; Full with the N ended
	// runs beside it.
	Empty HistoryFigures `json:"empty"`
	Full  HistoryFigures `json:"full"`
	// Ratios are Full over Empty per timed figure; WorstRatio the highest,
	// of WorstFigure. RatiosOK: the worst ratio to the twin is within
	// HistoryRatioBound.
	Ratios      map[string]float64 `json:"ratios"`
	WorstRatio  float64            `json:"worst_ratio_to_empty"`
	WorstFigure string             `json:"worst_figure"`
	RatiosOK    bool               `json:"ratios_ok"`
	// The twin is a second store on servers of its own with the same live
	// work and no history, measured in the same rounds as the measured
	// store, the two in turn: the machine's load moves between the empty
	// and the full measure (a fill takes minutes), not within a round.
	// TwinEmpty and TwinFull are its figures at each measure; TwinRatios
	// are Full over TwinFull (what the history costs, the load of the
	// moment the same for both), and TwinRatiosEmpty Empty over TwinEmpty
	// (two stores alike: how far apart the noise puts them).
	TwinEmpty           HistoryFigures     `json:"twin_empty"`
	TwinFull            HistoryFigures     `json:"twin_full"`
	TwinRatios          map[string]float64 `json:"ratios_to_twin"`
	WorstTwinRatio      float64            `json:"worst_ratio_to_twin"`
	WorstTwinFigure     string             `json:"worst_figure_to_twin"`
	TwinRatiosEmpty     map[string]float64 `json:"ratios_to_twin_empty"`
	WorstTwinRatioEmpty float64            `json:"worst_ratio_to_twin_empty"`
	// StoreBytes before and after the fill: Redis INFO used_memory, or
	// the KV bucket stream's bytes; BytesPerEndedRun their growth per
	// ended run, the run index included.
	StoreBytesEmpty  int64   `json:"store_bytes_empty"`
	StoreBytesFull   int64   `json:"store_bytes_full"`
	BytesPerEndedRun float64 `json:"bytes_per_ended_run"`
	// PurgeRunsPerS and BytesPerTombstone are the purge measure, nil until
	// purge exists (measurePurge).
	PurgeRunsPerS     *float64 `json:"purge_runs_per_s,omitempty"`
	BytesPerTombstone *float64 `json:"bytes_per_tombstone,omitempty"`
	PurgeSeconds      float64  `json:"purge_s,omitempty"`
	// PurgeRate is the pace of the paced purge (runs/s), at most;
	// PacedPurgeRunsPerS what it purged a second while the live work's
	// figures were taken (the default share of the time, unless the
	// store was slower).
	PurgeRate          int     `json:"purge_rate,omitempty"`
	PacedPurgeRunsPerS float64 `json:"paced_purge_runs_per_s,omitempty"`
	StoreBytesPurged   int64   `json:"store_bytes_purged,omitempty"`
	// DuringPurge are the live work's figures taken while a purge at the
	// scheduler's default pace ran, TwinDuringPurge the twin's in the same
	// rounds. PurgeRatios are what the purge costs each figure: its ratio
	// to the twin during the purge over its ratio to the twin just before
	// (Full to TwinFull), which takes out the machine's load of each
	// moment and the history's own cost. PurgeRunsPerS is the unpaced
	// purge's rate.
	DuringPurge      HistoryFigures     `json:"during_purge"`
	TwinDuringPurge  HistoryFigures     `json:"twin_during_purge"`
	PurgeRatios      map[string]float64 `json:"ratios_during_purge,omitempty"`
	WorstPurgeRatio  float64            `json:"worst_ratio_during_purge,omitempty"`
	WorstPurgeFigure string             `json:"worst_figure_during_purge,omitempty"`
	PhaseSeconds     float64            `json:"phase_s"`
	// Error is why the phase failed on this store; the other figures are
	// then what it measured before.
	Error string `json:"error,omitempty"`
}

// RunFootprint is what one run occupies in a store.
type RunFootprint struct {
	// Keys is how many keys the run has (0 where the store does not say).
	Keys  int   `json:"keys,omitempty"`
	Bytes int64 `json:"bytes"`
}

// HistoryFigures are one measure of a store: each the median of the
// rounds (of historyQuickReps per round for a page of runs), the start p50
// over every start of them.
type HistoryFigures struct {
	// RepairMS: one scheduler.Repair pass.
	RepairMS float64 `json:"repair_ms"`
	// ListPageMS: client.ListPage of the first historyPageLimit runs,
	// newest first, no filter.
	ListPageMS float64 `json:"list_page_ms"`
	// APIRunsMS: GET /api/runs?limit=50 through the approver's handler
	// (the page, the counters and the JSON).
	APIRunsMS float64 `json:"api_runs_ms"`
	// GaugesMS: one fleet scan (metrics.Fleet.Scan) and one /metrics
	// scrape after it, ScanMS and ScrapeMS apart.
	GaugesMS float64 `json:"gauges_ms"`
	ScanMS   float64 `json:"fleet_scan_ms"`
	ScrapeMS float64 `json:"scrape_ms"`
	// ScanAllocMiB is what the bench process allocated during the scan,
	// HeapInuseMiB its in-use heap right after it (the embedded
	// nats-server's included).
	ScanAllocMiB float64 `json:"fleet_scan_alloc_mib"`
	HeapInuseMiB float64 `json:"heap_inuse_after_scan_mib"`
	// RunsListMS: client.List of the waiting runs, what `durable runs
	// list --status waiting --limit 0` reads (every one).
	RunsListMS float64 `json:"runs_list_waiting_ms"`
	// StartP50MS: client.Start of a claims-9 run, one at a time.
	StartP50MS float64 `json:"start_p50_ms"`
	// StepP50MS: the p50 of a step of a bench-linear run, one run of
	// historyStepsPerRun steps a round through a worker process, a step
	// timed from its predecessor's checkpoint (the first from the run's
	// creation) to its own: publish, delivery, body and commit. The
	// measured store's only (the twin has no worker: two would share the
	// workflow's consumer).
	StepP50MS float64 `json:"step_p50_ms,omitempty"`
}

// timed are the figures the ratios compare, by name.
func (f HistoryFigures) timed() []namedFigure {
	return []namedFigure{
		{"repair", f.RepairMS}, {"list_page", f.ListPageMS}, {"api_runs", f.APIRunsMS},
		{"gauges", f.GaugesMS}, {"runs_list", f.RunsListMS}, {"start_p50", f.StartP50MS}, {"step_p50", f.StepP50MS},
	}
}

type namedFigure struct {
	name string
	ms   float64
}

// History runs the history phase with n ended runs on each store of the
// bench, one after the other. A store that fails gets its error in its
// result and the next store is measured all the same (see
// Report.Failures).
func (b *Bench) History(ctx context.Context, n int) ([]HistoryResult, error) {
	var out []HistoryResult
	for _, sys := range b.systems {
		if sys.mode != ModeDurable {
			continue
		}
		res, err := b.historyOn(ctx, sys, n)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("bench interrupted during the history phase: %w", ctx.Err())
			}
			res.Error = err.Error()
			b.progress.linef("%-36s failed: %v", sys.name+" history", err)
		}
		out = append(out, *res)
	}
	return out, nil
}

// historyOn measures the store of sys empty, fills it and measures again.
// It returns what it measured, also on an error.
func (b *Bench) historyOn(ctx context.Context, sys *system, n int) (*HistoryResult, error) {
	began := time.Now()
	res := &HistoryResult{System: sys.name, EndedRuns: n, WaitingRuns: HistoryWaitingRuns, RunningRuns: HistoryRunningRuns,
		Rounds: historyRounds, Fill: historyFill, FillConcurrency: historyFillConcurrency}
	h, err := b.newHistoryPhase(ctx, sys, res)
	if err != nil {
		return res, err
	}
	defer h.close()
	if err := h.setUp(ctx); err != nil {
		return res, err
	}
	if res.Empty, res.TwinEmpty, err = h.measure(ctx, "empty"); err != nil {
		return res, err
	}
	if err := h.fillAll(ctx, n); err != nil {
		return res, err
	}
	if res.Full, res.TwinFull, err = h.measure(ctx, fmt.Sprintf("%d ended", n)); err != nil {
		return res, err
	}
	res.ratios()
	if err := h.measurePurge(ctx); err != nil {
		return res, err
	}
	res.PhaseSeconds = time.Since(began).Seconds()
	b.progress.linef("%-36s worst ratio to empty %.2f (%s), to the twin %.2f (%s); %.0f bytes per ended run; phase %.1fs",
		h.label, res.WorstRatio, res.WorstFigure, res.WorstTwinRatio, res.WorstTwinFigure, res.BytesPerEndedRun, res.PhaseSeconds)
	return res, nil
}

// measurePurge purges the N ended runs as `durable scheduler
// --retention` does, one scheduler, in two halves. The older half
// unpaced (PurgeRate unbounded, PurgeShare 1): the most one scheduler
// takes from the store, PurgeRunsPerS (bound HistoryPurgeBound). The
// newer half at the scheduler's default pace (scheduler.DefaultPurgeRate
// and DefaultPurgeShare, unless the bench was given a rate) while the live
// work's figures are taken again: DuringPurge, against Full (the same
// store just before) and TwinDuringPurge. Then BytesPerTombstone: the
// store's bytes after the purge, less the empty store's, per purged run.
// A store without checkpoint.Retention is skipped: bytes_per_tombstone=na.
func (h *historyPhase) measurePurge(ctx context.Context) error {
	if _, ok := h.main.store.(checkpoint.Retention); !ok {
		h.b.progress.linef("%-36s no purge: the store does not offer retention yet", h.label)
		return nil
	}
	res := h.res
	// The ended runs were created over historySpan before the live work.
	older, err := h.purge(ctx, h.liveSince.Add(-historySpan/2), math.MaxInt32, 1)
	if err != nil {
		return err
	}
	rate := float64(older.Purged) / older.took.Seconds()
	res.PurgeRunsPerS = &rate
	pace := cmp.Or(h.b.cfg.HistoryPurgeRate, scheduler.DefaultPurgeRate)
	res.PurgeRate = pace
	// The paced purge runs while the figures are taken, and stops after
	// its chunk under way once they are; the rest goes unpaced.
	done := make(chan purged, 1)
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		p, err := h.purge(pctx, h.liveSince, pace, 0)
		p.err = err
		done <- p
	}()
	res.DuringPurge, res.TwinDuringPurge, err = h.measure(ctx, "during a paced purge")
	stop()
	newer := <-done
	if err = errors.Join(err, newer.err); err != nil {
		return err
	}
	rest, err := h.purge(ctx, h.liveSince, math.MaxInt32, 1)
	if err != nil {
		return err
	}
	if all := older.Purged + newer.Purged + rest.Purged; all < res.EndedRuns {
		return fmt.Errorf("%s: purged %d of %d ended runs", h.label, all, res.EndedRuns)
	}
	res.PurgeSeconds = older.took.Seconds() + newer.took.Seconds() + rest.took.Seconds()
	res.PacedPurgeRunsPerS = float64(newer.Purged) / newer.took.Seconds()
	res.PurgeRatios, res.WorstPurgeRatio, res.WorstPurgeFigure = purgeCost(res)
	if err := h.settle(ctx); err != nil {
		return err
	}
	after, err := h.storeBytes(ctx)
	if err != nil {
		return err
	}
	tomb := float64(after-res.StoreBytesEmpty) / float64(res.EndedRuns)
	res.StoreBytesPurged, res.BytesPerTombstone = after, &tomb
	h.b.progress.linef("%-36s %d runs purged unpaced in %.1fs (%.0f/s); %d paced (at most %d/s, working %.0f%% of the time) in %.1fs (%.0f/s), during which the purge's worst cost was %.2fx (%s); %d unpaced after; %.0f bytes per tombstone",
		h.label, older.Purged, older.took.Seconds(), rate, newer.Purged, pace, 100*scheduler.DefaultPurgeShare, newer.took.Seconds(), res.PacedPurgeRunsPerS,
		res.WorstPurgeRatio, res.WorstPurgeFigure, rest.Purged, tomb)
	return nil
}

// purged is what one purge pass did, and how long it took.
type purged struct {
	scheduler.PurgeResult
	took time.Duration
	err  error
}

// purge purges, with one scheduler at rate working share of the time (0:
// the scheduler's default), the measured store's runs that ended before
// cutoff.
func (h *historyPhase) purge(ctx context.Context, cutoff time.Time, rate int, share float64) (purged, error) {
	nop := zerolog.Nop()
	sch, err := scheduler.New(scheduler.Config{Client: h.main.cl, Retention: time.Since(cutoff), PurgeRate: rate, PurgeShare: share, Logger: &nop})
	if err != nil {
		return purged{}, err
	}
	began := time.Now()
	r := sch.Purge(ctx)
	return purged{PurgeResult: r, took: time.Since(began)}, nil
}

// ratios sets the ratios of Full to Empty, of Full to TwinFull and of
// Empty to TwinEmpty, and the worst of each.
func (r *HistoryResult) ratios() {
	r.Ratios, r.WorstRatio, r.WorstFigure = ratiosOf(r.Full, r.Empty)
	r.TwinRatios, r.WorstTwinRatio, r.WorstTwinFigure = ratiosOf(r.Full, r.TwinFull)
	r.RatiosOK = r.WorstTwinRatio <= HistoryRatioBound
	r.TwinRatiosEmpty, r.WorstTwinRatioEmpty, _ = ratiosOf(r.Empty, r.TwinEmpty)
}

// purgeCost divides each figure's ratio to the twin during the purge by
// its ratio to the twin before it, and names the highest.
func purgeCost(r *HistoryResult) (ratios map[string]float64, worst float64, worstName string) {
	during, _, _ := ratiosOf(r.DuringPurge, r.TwinDuringPurge)
	before, _, _ := ratiosOf(r.Full, r.TwinFull)
	ratios = map[string]float64{}
	for name, d := range during {
		b, ok := before[name]
		if !ok || b <= 0 {
			continue
		}
		ratios[name] = d / b
		if d/b > worst {
			worst, worstName = d/b, name
		}
	}
	return ratios, worst, worstName
}

// ratiosOf divides each timed figure of num by den's and names the
// highest ratio.
func ratiosOf(num, den HistoryFigures) (ratios map[string]float64, worst float64, worstName string) {
	ratios = map[string]float64{}
	d := den.timed()
	for i, f := range num.timed() {
		if d[i].ms <= 0 {
			continue
		}
		x := f.ms / d[i].ms
		ratios[f.name] = x
		if x > worst {
			worst, worstName = x, f.name
		}
	}
	return ratios, worst, worstName
}

// resultLine is the RESULT line of issue 24: the figures with the N
// ended runs, then those the line leaves out.
func (r *HistoryResult) resultLine(durability string) string {
	tomb, purgeRate := "na", "na"
	if r.BytesPerTombstone != nil {
		tomb = fmt.Sprintf("%.0f", *r.BytesPerTombstone)
	}
	if r.PurgeRunsPerS != nil {
		purgeRate = fmt.Sprintf("%.0f", *r.PurgeRunsPerS)
	}
	return fmt.Sprintf("RESULT system=%s phase=history ended_runs=%d repair_ms=%.2f list_page_ms=%.2f gauges_ms=%.2f start_p50_ms=%.3f worst_ratio_to_empty=%.2f bytes_per_ended_run=%.0f bytes_per_tombstone=%s"+
		" runs_list_ms=%.2f api_runs_ms=%.2f step_p50_ms=%.3f worst_ratio_to_twin=%.2f purge_runs_per_s=%s purge_rate=%d worst_ratio_during_purge=%.2f step_p50_ratio_during_purge=%.2f fill=%s durability=%s",
		r.System, r.EndedRuns, r.Full.RepairMS, r.Full.ListPageMS, r.Full.GaugesMS, r.Full.StartP50MS, r.WorstRatio, r.BytesPerEndedRun, tomb,
		r.Full.RunsListMS, r.Full.APIRunsMS, r.Full.StepP50MS, r.WorstTwinRatio, purgeRate, r.PurgeRate, r.WorstPurgeRatio, r.PurgeRatios["step_p50"], r.Fill, durability)
}

// Failures joins the errors of the phases that failed on a store while
// the others went on; nil when none did.
func (r *Report) Failures() error {
	var errs []error
	for _, h := range r.History {
		if h.Error != "" {
			errs = append(errs, errors.New(h.Error))
		}
	}
	return errors.Join(errs...)
}

// writeHistory prints the history phase's table per store.
func writeHistory(b *strings.Builder, rs []HistoryResult) error {
	for _, r := range rs {
		fmt.Fprintf(b, "history on %s: %d ended runs beside %d waiting and %d running; each figure the median of %d rounds\n",
			r.System, r.EndedRuns, r.WaitingRuns, r.RunningRuns, r.Rounds)
		if r.Error != "" {
			fmt.Fprintf(b, "FAILED: %s\n\n", r.Error)
			continue
		}
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "figure\tempty\twith %d ended\tratio\ttwin, same rounds\tratio to twin\tempty to twin\t\n", r.EndedRuns)
		row := func(name, what string, f func(HistoryFigures) float64) {
			fmt.Fprintf(tw, "%s\t%.2f ms\t%.2f ms\t%s\t%.2f ms\t%s\t%s\t\n", what, f(r.Empty), f(r.Full), ratioOf(r.Ratios, name),
				f(r.TwinFull), ratioOf(r.TwinRatios, name), ratioOf(r.TwinRatiosEmpty, name))
		}
		row("repair", "repair pass (scheduler.Repair)", func(f HistoryFigures) float64 { return f.RepairMS })
		row("list_page", fmt.Sprintf("first page of %d (client.ListPage)", historyPageLimit), func(f HistoryFigures) float64 { return f.ListPageMS })
		row("api_runs", fmt.Sprintf("GET /api/runs?limit=%d (approver)", historyPageLimit), func(f HistoryFigures) float64 { return f.APIRunsMS })
		row("gauges", "fleet scan + /metrics scrape", func(f HistoryFigures) float64 { return f.GaugesMS })
		fmt.Fprintf(tw, "  scan, scrape\t%.2f, %.2f ms\t%.2f, %.2f ms\t\t%.2f, %.2f ms\t\t\t\n", r.Empty.ScanMS, r.Empty.ScrapeMS, r.Full.ScanMS, r.Full.ScrapeMS, r.TwinFull.ScanMS, r.TwinFull.ScrapeMS)
		fmt.Fprintf(tw, "  allocated by the scan, heap in use after\t%.2f, %.1f MiB\t%.2f, %.1f MiB\t\t%.2f, %.1f MiB\t\t\t\n",
			r.Empty.ScanAllocMiB, r.Empty.HeapInuseMiB, r.Full.ScanAllocMiB, r.Full.HeapInuseMiB, r.TwinFull.ScanAllocMiB, r.TwinFull.HeapInuseMiB)
		row("runs_list", "runs list --status waiting --limit 0 (client.List)", func(f HistoryFigures) float64 { return f.RunsListMS })
		row("start_p50", "start p50 (client.Start, one at a time)", func(f HistoryFigures) float64 { return f.StartP50MS })
		row("step_p50", fmt.Sprintf("step p50 (a %d-step run through a worker)", historyStepsPerRound), func(f HistoryFigures) float64 { return f.StepP50MS })
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(b, "worst ratio to the twin: %.2f (%s), bound %.1f: %s; %.2f when both were empty (noise); worst ratio to empty: %.2f (%s, the machine's load of two moments)\n",
			r.WorstTwinRatio, r.WorstTwinFigure, HistoryRatioBound, verdict(r.RatiosOK), r.WorstTwinRatioEmpty, r.WorstRatio, r.WorstFigure)
		b.WriteString("the twin is a store on servers of its own, with the same live work and no history, measured in the same rounds:\n" +
			"the ratio to the twin is what the history costs, to the store and to its servers, with the machine's load of the moment taken out.\n")
		fmt.Fprintf(b, "store bytes: %.1f -> %.1f MiB, %.0f bytes per ended run (run index included); a real claims-9 run %s, a filled one %s\n",
			mib(r.StoreBytesEmpty), mib(r.StoreBytesFull), r.BytesPerEndedRun, r.Template, r.Filled)
		fmt.Fprintf(b, "fill: through the store (CreateRun + 9 Commits of the real run's record and checkpoints, %d at once): %.1fs, %.0f runs/s; CPU s: redis-server %.1f, bench process %.1f; quiet again (no AOF rewrite, dirty pages written back) after %.1fs\n",
			r.FillConcurrency, r.FillSeconds, r.FillRunsPerS, r.FillCPU.Redis, r.FillCPU.Bench, r.SettleSeconds)
		if err := writePurge(b, r); err != nil {
			return err
		}
		if r.BytesPerTombstone == nil {
			fmt.Fprintf(b, "purge: not built yet (bytes per tombstone and purge runs/s, bound %d per scheduler, wait for it)\n", HistoryPurgeBound)
		} else {
			fmt.Fprintf(b, "purge: %.0f runs/s (bound %d per scheduler), %.0f bytes per tombstone\n", *r.PurgeRunsPerS, HistoryPurgeBound, *r.BytesPerTombstone)
		}
		fmt.Fprintf(b, "phase %.1fs\n\n", r.PhaseSeconds)
	}
	return nil
}

// writePurge prints the live work's figures during the paced purge
// beside the twin's in the same rounds, and what the purge cost each.
func writePurge(b *strings.Builder, r HistoryResult) error {
	if r.PurgeRatios == nil {
		return nil
	}
	fmt.Fprintf(b, "during a purge at %d runs/s:\n", r.PurgeRate)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\tduring the purge\ttwin, same rounds\tratio to twin\tbefore the purge\tthe purge's cost\t\n")
	twin := r.TwinDuringPurge.timed()
	during, _, _ := ratiosOf(r.DuringPurge, r.TwinDuringPurge)
	for i, f := range r.DuringPurge.timed() {
		fmt.Fprintf(tw, "%s\t%.2f ms\t%.2f ms\t%s\t%s\t%s\t\n", f.name, f.ms, twin[i].ms,
			ratioOf(during, f.name), ratioOf(r.TwinRatios, f.name), ratioOf(r.PurgeRatios, f.name))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(b, "the purge's cost is the ratio to the twin during the purge over the ratio to the twin before it; worst %.2f (%s)\n",
		r.WorstPurgeRatio, r.WorstPurgeFigure)
	return nil
}

func (f RunFootprint) String() string {
	if f.Keys > 0 {
		return fmt.Sprintf("%d B in %d keys", f.Bytes, f.Keys)
	}
	return fmt.Sprintf("%d B", f.Bytes)
}

func ratioOf(ratios map[string]float64, name string) string {
	x, ok := ratios[name]
	if !ok || math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x)
}

// medianMS is the median of d in milliseconds.
func medianMS(d []time.Duration) float64 { return ms(Percentile(d, 0.5)) }

// medianBytes is the median of b.
func medianBytes(b []int64) int64 {
	if len(b) == 0 {
		return 0
	}
	s := slices.Clone(b)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// checkRuns says whether runs are n.
func checkRuns[T any](what string, runs []T, n int) error {
	if len(runs) != n {
		return fmt.Errorf("%s: %d runs, want %d", what, len(runs), n)
	}
	return nil
}
