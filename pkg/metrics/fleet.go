package metrics

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// FleetConfig configures the fleet scan. Zero values take the defaults
// documented.
type FleetConfig struct {
	// Store is read with one ListRuns per pass. Required.
	Store checkpoint.Store
	// JetStream gives the consumers' and the dead-letter stream's state.
	// Optional: without it those gauges are not exported.
	JetStream jetstream.JetStream
	// Interval between passes. Default 30s.
	Interval time.Duration
	// StuckFactor times a step's p95 duration without progress makes a
	// running run stuck. Default 10.
	StuckFactor float64
	// StuckMin is the least time without progress that counts as stuck,
	// whatever the p95 (queueing is not in a step's duration). Default 1m.
	StuckMin time.Duration
	// StuckDefault is the threshold for a step whose p95 is not known yet
	// (fewer than 5 sampled durations). Default 5m, the scheduler's
	// --stuck-after.
	StuckDefault time.Duration
	// Sample bounds the checkpoints read per pass to learn step durations.
	// Default 256.
	Sample int
	// PastTTLGrace: a wait counts as past its TTL once its deadline is
	// this far behind (the scheduler sweeps every second). Default 1m.
	PastTTLGrace time.Duration
	// Logger for structured logs. Default: zerolog's global logger
	// (github.com/rs/zerolog/log.Logger); zerolog.Nop() silences it.
	Logger *zerolog.Logger
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
}

// Fleet computes the fleet gauges (runs by status, stuck runs, waits past
// their TTL, dead letters, consumer backlog) by a periodic scan, and
// exports the last pass on scrape. One pass costs one ListRuns (a read per
// run record: ~100k pipelined reads at 100k runs), at most Sample
// checkpoint reads and one JetStream request per consumer; scrapes cost
// nothing. Run it in the scheduler process; with several schedulers each
// exports the same gauges (aggregate with max).
type Fleet struct {
	cfg FleetConfig
	log zerolog.Logger

	mu       sync.Mutex
	last     *fleetSnapshot
	pass     int
	samples  map[stepKey]*ring
	scanErrs prometheus.Counter
}

type stepKey struct{ workflow, step string }

type fleetSnapshot struct {
	at        time.Time
	took      time.Duration
	runs      map[string]map[checkpoint.Status]int
	stuck     map[stepKey]int
	oldest    map[stepKey]float64
	threshold map[stepKey]float64
	pastTTL   map[[2]string]int // workflow, kind
	dlq       float64
	jsScanned bool // dlq and consumers were read
	consumers map[string]jetstream.ConsumerInfo
	// retention: the store offers checkpoint.Retention, so tombstones
	// and oldestEnded (seconds since the oldest ended run kept ended;
	// 0 with none) were read.
	retention   bool
	tombstones  int64
	oldestEnded float64
}

// NewFleet validates cfg and registers the fleet gauges on m.
func (m *Metrics) NewFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.Store == nil {
		return nil, errors.New("metrics: FleetConfig.Store is required")
	}
	if cfg.Interval < 0 || cfg.StuckFactor < 0 || cfg.StuckMin < 0 || cfg.StuckDefault < 0 || cfg.Sample < 0 || cfg.PastTTLGrace < 0 {
		return nil, errors.New("metrics: fleet durations and sizes must not be negative")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.StuckFactor == 0 {
		cfg.StuckFactor = 10
	}
	if cfg.StuckMin == 0 {
		cfg.StuckMin = time.Minute
	}
	if cfg.StuckDefault == 0 {
		cfg.StuckDefault = 5 * time.Minute
	}
	if cfg.Sample == 0 {
		cfg.Sample = 256
	}
	if cfg.PastTTLGrace == 0 {
		cfg.PastTTLGrace = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	f := &Fleet{cfg: cfg, log: log.Logger, samples: map[stepKey]*ring{}}
	if cfg.Logger != nil {
		f.log = *cfg.Logger
	}
	f.scanErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: "durable_fleet_scan_errors_total", Help: "Fleet scans that failed (store or JetStream unreachable); the gauges keep the last good pass."})
	m.reg.MustRegister(f.scanErrs, f)
	return f, nil
}

// Use replaces the store and JetStream the scans read (after a
// reconnect); the gauges keep the last pass until the next one.
func (f *Fleet) Use(store checkpoint.Store, js jetstream.JetStream) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cfg.Store, f.cfg.JetStream = store, js
}

// Run scans at once, then every Interval, until ctx ends.
func (f *Fleet) Run(ctx context.Context) error {
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		if err := f.Scan(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn().Err(err).Msg("fleet metrics scan")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// liveRuns reads the index's counters, which give every status, and the
// live runs, the only ones a scan reads.
func liveRuns(ctx context.Context, store checkpoint.Store) (checkpoint.RunCounts, []checkpoint.Run, error) {
	counts, err := store.CountRuns(ctx)
	if err != nil {
		return counts, nil, err
	}
	var runs []checkpoint.Run
	for _, st := range []checkpoint.Status{checkpoint.StatusRunning, checkpoint.StatusWaiting} {
		live, err := store.ListRuns(ctx, checkpoint.Filter{Status: st})
		if err != nil {
			return counts, nil, err
		}
		runs = append(runs, live...)
	}
	return counts, runs, nil
}

// Scan runs one pass and makes it what scrapes see.
func (f *Fleet) Scan(ctx context.Context) error {
	began := time.Now()
	now := f.cfg.Now()
	f.mu.Lock()
	store, js := f.cfg.Store, f.cfg.JetStream
	f.mu.Unlock()
	counts, runs, err := liveRuns(ctx, store)
	if err != nil {
		f.scanErrs.Inc()
		return err
	}
	s := &fleetSnapshot{at: now, runs: map[string]map[checkpoint.Status]int{}, stuck: map[stepKey]int{},
		oldest: map[stepKey]float64{}, threshold: map[stepKey]float64{}, pastTTL: map[[2]string]int{}}
	// Every registered workflow and step has its series, at zero while
	// nothing is there: a dashboard shows 0, not "no data", and an alert
	// on the series sees it go from 0 to 1.
	var steps []stepKey
	if wfs, err := store.Workflows(ctx); err == nil {
		for _, w := range wfs {
			s.runs[w.Name] = map[checkpoint.Status]int{}
			for _, step := range w.Steps {
				steps = append(steps, stepKey{w.Name, step})
			}
		}
	}
	s.addCounts(counts)
	var running []checkpoint.Run
	for _, r := range runs {
		switch r.Status {
		case checkpoint.StatusRunning:
			running = append(running, r)
		case checkpoint.StatusWaiting:
			// A wait for children has no deadline.
			if r.Wait != nil && !r.Wait.Deadline.IsZero() && now.Sub(r.Wait.Deadline) > f.cfg.PastTTLGrace {
				kind := r.Wait.Kind
				if kind == "" {
					kind = checkpoint.WaitApproval
				}
				s.pastTTL[[2]string{r.Workflow, kind}]++
			}
		}
	}
	if r, ok := store.(checkpoint.Retention); ok {
		if err := s.readRetention(ctx, r, now); err != nil {
			f.scanErrs.Inc()
			return err
		}
	}
	f.sampleDurations(ctx, store, running)
	f.mu.Lock()
	for _, k := range steps {
		s.oldest[k] = 0
		s.threshold[k] = f.thresholdLocked(k).Seconds()
	}
	for _, r := range running {
		k := stepKey{r.Workflow, r.StepName}
		age := now.Sub(r.UpdatedAt)
		s.oldest[k] = max(s.oldest[k], age.Seconds())
		th := f.thresholdLocked(k)
		s.threshold[k] = th.Seconds()
		if age > th {
			s.stuck[k]++
		}
	}
	f.mu.Unlock()
	if js != nil {
		if err := f.scanJetStream(ctx, js, s); err != nil {
			f.scanErrs.Inc()
			return err
		}
	}
	s.took = time.Since(began)
	f.mu.Lock()
	f.last = s
	f.mu.Unlock()
	return nil
}

func (f *Fleet) scanJetStream(ctx context.Context, js jetstream.JetStream, s *fleetSnapshot) error {
	s.consumers = map[string]jetstream.ConsumerInfo{}
	stream, err := js.Stream(ctx, queue.StepStream)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return err
	}
	if err == nil {
		lister := stream.ListConsumers(ctx)
		for info := range lister.Info() {
			s.consumers[info.Name] = *info
		}
		if err := lister.Err(); err != nil {
			return err
		}
	}
	// A registered workflow's consumer not created yet holds nothing.
	for wf := range s.runs {
		name := queue.ConsumerName(wf)
		if _, ok := s.consumers[name]; !ok {
			s.consumers[name] = jetstream.ConsumerInfo{Name: name}
		}
	}
	// No dead-letter stream yet: no dead letters (the gauge says 0).
	s.jsScanned = true
	dlq, err := js.Stream(ctx, queue.DLQStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	s.dlq = float64(dlq.CachedInfo().State.Msgs)
	return nil
}

// sampleDurations reads checkpoint n-1 of up to Sample running runs (a
// different window each pass) and keeps its step's duration: the p95 of
// each step comes from these.
func (f *Fleet) sampleDurations(ctx context.Context, store checkpoint.Store, running []checkpoint.Run) {
	f.mu.Lock()
	f.pass++
	start := 0
	if len(running) > 0 {
		start = (f.pass * f.cfg.Sample) % len(running)
	}
	f.mu.Unlock()
	for i := 0; i < min(f.cfg.Sample, len(running)); i++ {
		r := running[(start+i)%len(running)]
		if r.Step < 2 {
			continue
		}
		cp, err := store.Checkpoint(ctx, r.ID, r.Step-1)
		if err != nil {
			continue
		}
		f.mu.Lock()
		k := stepKey{r.Workflow, cp.Name}
		if f.samples[k] == nil {
			f.samples[k] = &ring{}
		}
		f.samples[k].add(time.Duration(cp.DurationMS * float64(time.Millisecond)))
		f.mu.Unlock()
	}
}

// thresholdLocked is how long a run may go without progress at step k.
func (f *Fleet) thresholdLocked(k stepKey) time.Duration {
	r := f.samples[k]
	if r == nil || r.n < 5 {
		return f.cfg.StuckDefault
	}
	return max(time.Duration(f.cfg.StuckFactor*float64(r.p95())), f.cfg.StuckMin)
}

// ring keeps the last 128 durations of a step.
type ring struct {
	d [128]time.Duration
	n int
}

func (r *ring) add(d time.Duration) {
	r.d[r.n%len(r.d)] = d
	r.n++
}

func (r *ring) p95() time.Duration {
	s := slices.Clone(r.d[:min(r.n, len(r.d))])
	slices.Sort(s)
	return s[(len(s)*95-1)/100]
}

var (
	descRuns      = prometheus.NewDesc("durable_runs", "Runs by workflow and status at the last fleet scan.", []string{"workflow", "status"}, nil)
	descStuck     = prometheus.NewDesc("durable_runs_stuck", "Running runs without a checkpoint for more than their step's stuck threshold (10x the step's p95 duration, at least 1m; 5m while the p95 is unknown).", []string{"workflow", "step"}, nil)
	descOldest    = prometheus.NewDesc("durable_running_oldest_progress_age_seconds", "Longest time a running run at this step has gone without progress (its record unchanged).", []string{"workflow", "step"}, nil)
	descThreshold = prometheus.NewDesc("durable_stuck_threshold_seconds", "The stuck threshold the fleet scan applied to the step.", []string{"workflow", "step"}, nil)
	descPastTTL   = prometheus.NewDesc("durable_waits_past_ttl", "Waiting runs whose deadline (approval TTL or timer) passed more than the grace ago without the scheduler handling it.", []string{"workflow", "kind"}, nil)
	descDLQ       = prometheus.NewDesc("durable_dead_letter_messages", "Messages in the dead-letter stream.", nil, nil)
	descPending   = prometheus.NewDesc("durable_consumer_pending_messages", "Step messages not yet delivered to a worker, by consumer.", []string{"consumer"}, nil)
	descAckPend   = prometheus.NewDesc("durable_consumer_ack_pending_messages", "Step messages delivered and not yet acknowledged, by consumer.", []string{"consumer"}, nil)
	descRedeliv   = prometheus.NewDesc("durable_consumer_redelivered_messages", "Unacknowledged step messages delivered more than once, by consumer.", []string{"consumer"}, nil)
	descTombs     = prometheus.NewDesc("durable_run_tombstones", "Tombstones of purged runs kept (each keeps its run id taken for the tombstone retention).", nil, nil)
	descOldestEnd = prometheus.NewDesc("durable_oldest_ended_run_age_seconds", "Time since the oldest ended run the store keeps ended: above the scheduler's --retention, the purge is behind or keeps runs (a dead letter in the DLQ, a live parent or child). 0 with none.", nil, nil)
	descScanAt    = prometheus.NewDesc("durable_fleet_scan_timestamp_seconds", "When the last good fleet scan ran (Unix time).", nil, nil)
	descScanTook  = prometheus.NewDesc("durable_fleet_scan_duration_seconds", "How long the last good fleet scan took.", nil, nil)
)

var statuses = []checkpoint.Status{checkpoint.StatusRunning, checkpoint.StatusWaiting, checkpoint.StatusCompleted, checkpoint.StatusFailed, checkpoint.StatusCancelled, checkpoint.StatusDead}

// Describe implements prometheus.Collector.
func (f *Fleet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descStuck, descOldest, descThreshold, descPastTTL, descDLQ, descPending, descAckPend, descRedeliv, descTombs, descOldestEnd, descScanAt, descScanTook} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last pass, nothing before
// the first one.
func (f *Fleet) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	s := f.last
	f.mu.Unlock()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for wf, by := range s.runs {
		for _, st := range statuses {
			gauge(descRuns, float64(by[st]), wf, string(st))
		}
		// Zeros for every known workflow, so alerts see 0 rather than no series.
		for _, kind := range []string{checkpoint.WaitApproval, checkpoint.WaitTimer, checkpoint.WaitSignal} {
			gauge(descPastTTL, float64(s.pastTTL[[2]string{wf, kind}]), wf, kind)
		}
	}
	for k, age := range s.oldest {
		gauge(descOldest, age, k.workflow, k.step)
		gauge(descThreshold, s.threshold[k], k.workflow, k.step)
		gauge(descStuck, float64(s.stuck[k]), k.workflow, k.step)
	}
	if s.jsScanned {
		gauge(descDLQ, s.dlq)
	}
	for name, c := range s.consumers {
		gauge(descPending, float64(c.NumPending), name)
		gauge(descAckPend, float64(c.NumAckPending), name)
		gauge(descRedeliv, float64(c.NumRedelivered), name)
	}
	if s.retention {
		gauge(descTombs, float64(s.tombstones))
		gauge(descOldestEnd, s.oldestEnded)
	}
	gauge(descScanAt, float64(s.at.UnixMilli())/1000)
	gauge(descScanTook, s.took.Seconds())
}

// readRetention reads the tombstones kept and the oldest ended run: one
// entry of the index of ended runs, not the runs.
func (s *fleetSnapshot) readRetention(ctx context.Context, r checkpoint.Retention, now time.Time) error {
	n, err := r.Tombstones(ctx)
	if err != nil {
		return err
	}
	oldest, err := r.EndedBefore(ctx, now, 1)
	if err != nil {
		return err
	}
	s.retention, s.tombstones = true, n
	if len(oldest) == 1 {
		s.oldestEnded = max(0, now.Sub(oldest[0].UpdatedAt).Seconds())
	}
	return nil
}

// addCounts sets the runs per workflow and status from the index's counters.
func (s *fleetSnapshot) addCounts(counts checkpoint.RunCounts) {
	for wf, byStatus := range counts.Workflow {
		if s.runs[wf] == nil {
			s.runs[wf] = map[checkpoint.Status]int{}
		}
		for st, n := range byStatus {
			s.runs[wf][st] = int(n)
		}
	}
}
