package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/tokens"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/scheduler"
)

// historyInstruments are what the history phase measures a store
// through, each the real component: a scheduler as `durable scheduler`
// configures it (its repair pass), the fleet gauges on a metrics registry
// of their own (scan and scrape), and the approver's HTTP handler with an
// operator's token (GET /api/runs).
type historyInstruments struct {
	sched    *scheduler.Scheduler
	schedLog string
	logf     *os.File
	fleet    *metrics.Fleet
	scrape   http.Handler
	api      http.Handler
	token    string
}

// newHistoryInstruments builds the instruments of s; name tells its files
// apart in the bench's directory.
func (b *Bench) newHistoryInstruments(name string, s *historyStore) (*historyInstruments, error) {
	in := &historyInstruments{schedLog: filepath.Join(b.dir, "scheduler-"+name+"-history.log")}
	logf, err := os.Create(in.schedLog)
	if err != nil {
		return nil, err
	}
	in.logf = logf
	// The scheduler logs what it repairs, to a file as in production.
	lvl, err := zerolog.ParseLevel(b.cfg.WorkerLogLevel)
	if err != nil || lvl == zerolog.NoLevel {
		lvl = zerolog.InfoLevel
	}
	log := zerolog.New(logf).Level(lvl).With().Timestamp().Str("component", "scheduler").Logger()
	if in.sched, err = scheduler.New(scheduler.Config{Client: s.cl, Logger: &log}); err != nil {
		return in, err
	}
	nop := zerolog.Nop()
	m := metrics.New()
	if in.fleet, err = m.NewFleet(metrics.FleetConfig{Store: s.store, JetStream: s.js, Logger: &nop}); err != nil {
		return in, err
	}
	in.scrape = m.Handler()
	path := filepath.Join(b.dir, "tokens-"+name+".json")
	if in.token, err = tokens.Create(path, "bench-operator", []string{approver.OperatorsGroup}); err != nil {
		return in, err
	}
	set, err := tokens.Load(path)
	if err != nil {
		return in, err
	}
	srv, err := approver.New(approver.Config{Client: s.cl, Tokens: set, Logger: &nop})
	if err != nil {
		return in, err
	}
	in.api = srv.Handler()
	return in, nil
}

// close closes the scheduler's log.
func (in *historyInstruments) close() {
	if in != nil && in.logf != nil {
		_ = in.logf.Close()
	}
}

// historySamples are the rounds' timings of one store.
type historySamples struct {
	repair, page, api, scan, scrape, gauges, runsList, starts, steps []time.Duration
	scanAlloc, heapInuse                                             []int64 // bytes
}

func (s *historySamples) figures() HistoryFigures {
	return HistoryFigures{
		RepairMS: medianMS(s.repair), ListPageMS: medianMS(s.page), APIRunsMS: medianMS(s.api),
		GaugesMS: medianMS(s.gauges), ScanMS: medianMS(s.scan), ScrapeMS: medianMS(s.scrape),
		ScanAllocMiB: mib(medianBytes(s.scanAlloc)), HeapInuseMiB: mib(medianBytes(s.heapInuse)),
		RunsListMS: medianMS(s.runsList), StartP50MS: medianMS(s.starts), StepP50MS: medianMS(s.steps),
	}
}

// measure takes the figures of the measured store as it is, and of its
// twin in the same rounds: a round not counted, then historyRounds
// rounds. A round takes each figure of one store right after the same
// figure of the other, each store first in every other round, so that
// the two see the same load.
func (h *historyPhase) measure(ctx context.Context, what string) (main, twin HistoryFigures, err error) {
	runtime.GC() // what an earlier step left is not the scan's
	var ms, ts historySamples
	for r := -1; r < h.rounds; r++ {
		pair := []*historyStore{h.main, h.twin}
		samples := map[*historyStore]*historySamples{h.main: &ms, h.twin: &ts}
		if r < 0 {
			samples = map[*historyStore]*historySamples{h.main: {}, h.twin: {}}
		}
		if r%2 != 0 {
			pair[0], pair[1] = pair[1], pair[0]
		}
		for _, figure := range historyFigures {
			for _, s := range pair {
				if err := figure(s, ctx, samples[s]); err != nil {
					return main, twin, fmt.Errorf("%s, %s: %w", h.label, what, err)
				}
			}
		}
	}
	main, twin = ms.figures(), ts.figures()
	h.b.progress.linef("%-36s repair %.2f ms, page %.2f ms, api %.2f ms, gauges %.2f ms, runs list %.2f ms, start p50 %.3f ms, step p50 %.3f ms",
		h.label+", "+what, main.RepairMS, main.ListPageMS, main.APIRunsMS, main.GaugesMS, main.RunsListMS, main.StartP50MS, main.StepP50MS)
	return main, twin, nil
}

// historyFigures take, each, one figure of a store once in a round.
var historyFigures = []func(s *historyStore, ctx context.Context, sm *historySamples) error{
	(*historyStore).repair, (*historyStore).pages, (*historyStore).gauges, (*historyStore).runsList, (*historyStore).starts,
	(*historyStore).steps,
}

// steps runs one bench-linear run of historyStepsPerRound steps to its
// end on a store with a step worker, and times each step from the
// checkpoint before it (the first from the run's creation).
func (s *historyStore) steps(ctx context.Context, sm *historySamples) error {
	if !s.stepper {
		return nil
	}
	id := s.id("step", s.stepRuns)
	s.stepRuns++
	input, err := json.Marshal(SpreadState{N: historyStepsPerRound})
	if err != nil {
		return err
	}
	if _, err := runToEnd(ctx, s.cl, LinearWorkflow, id, input); err != nil {
		return fmt.Errorf("step run: %w", err)
	}
	run, err := s.store.GetRun(ctx, id)
	if err != nil {
		return fmt.Errorf("step run: %w", err)
	}
	cps, err := s.store.Checkpoints(ctx, id)
	if err != nil || len(cps) != historyStepsPerRound {
		return fmt.Errorf("step run %s: %d checkpoints, %v; want %d", id, len(cps), err, historyStepsPerRound)
	}
	prev := run.CreatedAt
	for _, cp := range cps {
		sm.steps = append(sm.steps, cp.At.Sub(prev))
		prev = cp.At
	}
	return nil
}

// repair times one repair pass.
func (s *historyStore) repair(ctx context.Context, sm *historySamples) error {
	in := s.inst
	errs := in.sched.Stats().Errors
	began := time.Now()
	in.sched.Repair(ctx)
	sm.repair = append(sm.repair, time.Since(began))
	if n := in.sched.Stats().Errors - errs; n > 0 {
		return fmt.Errorf("repair pass: %d errors; log %s", n, in.schedLog)
	}
	return nil
}

// pages times the first page of runs, and the same through the approver:
// a millisecond each, so historyQuickReps of each.
func (s *historyStore) pages(ctx context.Context, sm *historySamples) error {
	for range historyQuickReps {
		began := time.Now()
		page, err := s.cl.ListPage(ctx, client.ListFilter{}, historyPageLimit, checkpoint.Cursor{})
		sm.page = append(sm.page, time.Since(began))
		if err != nil {
			return fmt.Errorf("list page: %w", err)
		}
		if err := checkRuns("list page", page.Runs, historyPageLimit); err != nil {
			return err
		}
		if err := s.apiRuns(ctx, sm); err != nil {
			return err
		}
	}
	return nil
}

// runsList times `durable runs list --status waiting --limit 0`.
func (s *historyStore) runsList(ctx context.Context, sm *historySamples) error {
	began := time.Now()
	waiting, err := s.cl.List(ctx, client.ListFilter{Status: checkpoint.StatusWaiting})
	sm.runsList = append(sm.runsList, time.Since(began))
	if err != nil {
		return fmt.Errorf("runs list: %w", err)
	}
	return checkRuns("runs list --status waiting", waiting, s.waiting)
}

// apiRuns times GET /api/runs through the approver's handler.
func (s *historyStore) apiRuns(ctx context.Context, sm *historySamples) error {
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/runs?limit="+strconv.Itoa(historyPageLimit), nil)
	req.Header.Set("Authorization", "Bearer "+s.inst.token)
	rec := httptest.NewRecorder()
	began := time.Now()
	s.inst.api.ServeHTTP(rec, req)
	sm.api = append(sm.api, time.Since(began))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("GET /api/runs: %d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	var body approver.RunsPage
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		return fmt.Errorf("GET /api/runs: %w", err)
	}
	return checkRuns("GET /api/runs", body.Runs, historyPageLimit)
}

// gauges times one fleet scan and one /metrics scrape after it, and
// checks that the scrape has the waiting runs' gauge.
func (s *historyStore) gauges(ctx context.Context, sm *historySamples) error {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	began := time.Now()
	if err := s.inst.fleet.Scan(ctx); err != nil {
		return fmt.Errorf("fleet scan: %w", err)
	}
	scan := time.Since(began)
	runtime.ReadMemStats(&after)
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
	rec := httptest.NewRecorder()
	began = time.Now()
	s.inst.scrape.ServeHTTP(rec, req)
	scrape := time.Since(began)
	sm.scan, sm.scrape, sm.gauges = append(sm.scan, scan), append(sm.scrape, scrape), append(sm.gauges, scan+scrape)
	sm.scanAlloc = append(sm.scanAlloc, int64(after.TotalAlloc-before.TotalAlloc))
	sm.heapInuse = append(sm.heapInuse, int64(after.HeapInuse))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("GET /metrics: %d", rec.Code)
	}
	want := fmt.Sprintf(`durable_runs{status="waiting",workflow="%s"} %d`, ParkWorkflow, s.waiting)
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		if sc.Text() == want {
			return nil
		}
	}
	return fmt.Errorf("GET /metrics: no line %q", want)
}

// starts times historyStartsPerRound starts of claims-9 runs, one at a
// time, then cancels those runs: the live work stays what it was.
func (s *historyStore) starts(ctx context.Context, sm *historySamples) error {
	ids := make([]string, historyStartsPerRound)
	for i := range ids {
		ids[i] = s.id("probe", s.probes)
		s.probes++
		began := time.Now()
		err := s.startClaim(ctx, ids[i])
		sm.starts = append(sm.starts, time.Since(began))
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	for _, id := range ids {
		if _, err := s.cl.Cancel(ctx, id, "bench"); err != nil {
			return fmt.Errorf("cancel a measured start: %w", err)
		}
	}
	return nil
}
