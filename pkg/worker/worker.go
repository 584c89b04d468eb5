package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
)

// Config configures a worker. Zero values take the defaults documented.
type Config struct {
	// JetStream connection. Required. Make it with
	// jetstream.WithPublishAsyncTimeout(queue.PublishTimeout), as
	// pkg/service does: the worker publishes asynchronously and awaits the
	// PubAcks, and nats.go forgets one that never comes only with it.
	JetStream jetstream.JetStream
	// Store holds checkpoints and runs. Required.
	Store checkpoint.Store
	// Registry holds the workflows this worker runs. Required, not empty.
	Registry *steps.Registry
	// Concurrency is the number of steps run at once. Default 16.
	Concurrency int
	// AckWait is how long a delivery may go without an ack or heartbeat
	// before the server redelivers it. Default 30s.
	AckWait time.Duration
	// DrainTimeout bounds how long Run waits for in-flight steps once its
	// context ends; steps still running then are cancelled and released for
	// redelivery. Default AckWait.
	DrainTimeout time.Duration
	// StepTimeout bounds one run of a step body; past it the step's context
	// is cancelled and the attempt counts as failed. Default 10m.
	StepTimeout time.Duration
	// Budget bounds checkpoint sizes. Default checkpoint.DefaultBudget.
	Budget checkpoint.Budget
	// StreamReplicas for the streams the worker provisions. Default 1.
	StreamReplicas int
	// MaxAckPending of a workflow's shared consumer when this worker
	// creates it: the most steps of the workflow in flight across the
	// whole fleet (Little's law: steps/s x seconds per step). Default 0,
	// the server's default (1,000). A consumer that exists keeps its
	// settings: raise it with `nats consumer edit DURABLE_STEPS steps-<workflow> --max-pending N`.
	MaxAckPending int
	// Logger for structured logs. Default: zerolog's global logger
	// (github.com/rs/zerolog/log.Logger); zerolog.Nop() silences it.
	Logger *zerolog.Logger
	// Hooks run at the boundaries of the step protocol (see Hook), in
	// order. Optional.
	Hooks []Hook
	// Metrics receives step events. Optional.
	Metrics Metrics
	// Blobs keeps what steps store with PutBlob. Optional: without it
	// PutBlob and GetBlob fail with steps.ErrNoBlobStore.
	Blobs blob.Store
	// Flow holds the fleet-wide limits of the resources steps use
	// (`durable limit`): a step that uses a resource (steps.Uses) takes a
	// slot of its concurrency limit there, and a call made with
	// steps.Resource a token of its rate limit. Optional: nil is no flow
	// control, and every resource runs unlimited.
	Flow *flow.Store
}

// Metrics is the hook through which a worker reports; the Prometheus
// adapter is pkg/metrics, so this package does not import Prometheus. Methods
// are called on the step path and must not block. Embed NopMetrics to
// implement only some of them.
type Metrics interface {
	// StepDone is called once per handled delivery with its outcome:
	// committed, parked, completed, failed, dead, retry, stale, replayed,
	// lost (another writer won), malformed, error.
	StepDone(workflow, step, outcome string, d time.Duration)
	// CheckpointCommitted is called for each checkpoint this worker
	// commits: its size in bytes (checkpoint.Checkpoint.Size) and how many
	// bytes it grew over the step before's (negative when it shrank; 0 for
	// step 1 or when that size is unknown).
	CheckpointCommitted(workflow, step string, bytes, growth int)
	// Resumed is called when a redelivery that no recorded failure of the
	// step explains finds its run at the step (or just past it): the
	// delivery before crashed, hung past its ack wait or lost its ack.
	Resumed(workflow, step string)
	// EffectReplayed is called at commit for each effect the step noted as
	// replayed (steps.Context.Effect): the provider or the journal had
	// seen its key. tool is the effect's name, the last part of a
	// "<run>:step<n>:<name>" key, or the step name for "<run>:step<n>".
	EffectReplayed(workflow, tool string)
	// CallsReplayed is called at commit with the number of the step's
	// calls answered from the journal instead of being made again (n > 0).
	CallsReplayed(workflow, step string, n int)
	// JournalMismatch is called when a step replays a journaled call with
	// different arguments (steps.ErrJournalMismatch): a bug; the run goes
	// to the dead letters.
	JournalMismatch(workflow, step string)
	// DeadLettered is called when this worker sends a run to the dead
	// letters at step (once per run and death, not per republish).
	DeadLettered(workflow, step string)
	// BranchRunning is called with +1 when this worker starts a branch
	// body of a fan-out and -1 when it ends (branches in flight).
	BranchRunning(workflow string, delta int)
	// JoinPublished is called when this worker found every branch of a
	// fan-out committed and published its join.
	JoinPublished(workflow string)
	// ChildrenStarted is called with the number of child runs a step of
	// workflow started (each created once; a redelivery counts again).
	ChildrenStarted(workflow string, n int)
}

// NopMetrics reports nothing; embed it in a Metrics that implements only
// some of the methods.
type NopMetrics struct{}

func (NopMetrics) StepDone(string, string, string, time.Duration) {}
func (NopMetrics) CheckpointCommitted(string, string, int, int)   {}
func (NopMetrics) Resumed(string, string)                         {}
func (NopMetrics) EffectReplayed(string, string)                  {}
func (NopMetrics) CallsReplayed(string, string, int)              {}
func (NopMetrics) JournalMismatch(string, string)                 {}
func (NopMetrics) DeadLettered(string, string)                    {}
func (NopMetrics) BranchRunning(string, int)                      {}
func (NopMetrics) JoinPublished(string)                           {}
func (NopMetrics) ChildrenStarted(string, int)                    {}

// TracedMetrics is a Metrics that also takes the trace a delivery's span
// is in, when it is sampled: pkg/metrics keeps it as an exemplar of the
// step's duration, so a dashboard links a slow step to its trace. The
// worker calls StepDoneInTrace instead of StepDone when it has a trace.
type TracedMetrics interface {
	StepDoneInTrace(workflow, step, outcome string, d time.Duration, traceID string)
}

// Stats counts what a worker did since it started.
type Stats struct {
	Committed   int64 // steps committed by this worker
	Replayed    int64 // deliveries of already committed steps
	Republished int64 // next-step messages published again for a lost publish
	Stale       int64 // deliveries of steps the run is no longer at
	Lost        int64 // commits lost to another writer (the winner's result was used)
	Parked      int64 // runs parked for approval
	Retried     int64 // step errors that will be retried
	Dead        int64 // runs sent to the dead letters
	Malformed   int64 // undecodable messages, terminated
	Errors      int64 // transient errors (store or publish), released for redelivery
	Sticky      int64 // steps started from the state this worker committed, without a load (sticky.go)
}

type counters struct {
	committed, replayed, republished, stale, lost, parked, retried, dead, malformed, errors, sticky atomic.Int64
}

// Worker executes steps. Create with New, start with Run.
type Worker struct {
	cfg Config
	// heartbeat is a third of the consumer's ack wait, which may differ
	// from cfg.AckWait when the consumer was created by someone else.
	heartbeat time.Duration
	log       zerolog.Logger
	c         counters
	sem       chan struct{}
	sticky    *sticky
	// runs starts child runs and resumes their parents.
	runs *client.Client
	// pool holds the fleet's concurrency limits (nil without Config.Flow),
	// queue the deliveries waiting for its slots, and jobs and runCtx are
	// Run's, for handing granted deliveries to a runner (flowslots.go).
	pool   *flow.Pool
	queue  queued
	jobs   chan job
	runCtx context.Context
	// limiter takes the tokens of Config.Flow's limits; nil without it.
	limiter *flow.Limiter
}

// New validates cfg and returns a worker.
func New(cfg Config) (*Worker, error) {
	var errs []error
	if cfg.JetStream == nil {
		errs = append(errs, errors.New("worker: Config.JetStream is required"))
	}
	if cfg.Store == nil {
		errs = append(errs, errors.New("worker: Config.Store is required"))
	}
	if cfg.Registry == nil || len(cfg.Registry.Names()) == 0 {
		errs = append(errs, errors.New("worker: Config.Registry must hold at least one workflow"))
	}
	if cfg.Concurrency < 0 || cfg.AckWait < 0 || cfg.DrainTimeout < 0 || cfg.MaxAckPending < 0 {
		errs = append(errs, errors.New("worker: Concurrency, AckWait, DrainTimeout and MaxAckPending must not be negative"))
	}
	if cfg.AckWait > 0 && cfg.AckWait < 500*time.Millisecond {
		errs = append(errs, fmt.Errorf("worker: AckWait %s is too short (min 500ms)", cfg.AckWait))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = cfg.AckWait
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 10 * time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NopMetrics{}
	}
	w := &Worker{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency), heartbeat: cfg.AckWait / 3, sticky: newSticky(stickyBytes),
		runs: client.New(cfg.JetStream, cfg.Store)}
	if cfg.Flow != nil {
		w.limiter = flow.NewLimiter(cfg.Flow, flow.LimiterOptions{})
	}
	if cfg.Logger != nil {
		w.log = *cfg.Logger
	} else {
		w.log = log.Logger
	}
	return w, nil
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{
		Committed: w.c.committed.Load(), Replayed: w.c.replayed.Load(), Republished: w.c.republished.Load(),
		Stale: w.c.stale.Load(), Lost: w.c.lost.Load(), Parked: w.c.parked.Load(), Retried: w.c.retried.Load(),
		Dead: w.c.dead.Load(), Malformed: w.c.malformed.Load(), Errors: w.c.errors.Load(), Sticky: w.c.sticky.Load(),
	}
}

// Setup provisions the streams and the workflows' consumers and registers
// the workflows in the store. Run calls it; it is idempotent. Consumers come
// first: a workflow is advertised (and runs can start) only once its
// messages have a consumer.
func (w *Worker) Setup(ctx context.Context) ([]jetstream.Consumer, error) {
	if err := w.provision(ctx); err != nil {
		return nil, err
	}
	var cons []jetstream.Consumer
	for _, name := range w.cfg.Registry.Names() {
		c, err := w.ensureConsumer(ctx, name)
		if err != nil {
			return nil, err
		}
		// The consumer's ack wait is the one the server applies: a consumer
		// created by another worker or tuned by an operator is not
		// overwritten, but heartbeats must keep up with it.
		if aw := c.CachedInfo().Config.AckWait; aw > 0 && aw != w.cfg.AckWait {
			w.log.Warn().Str("consumer", queue.ConsumerName(name)).Dur("consumer_ack_wait", aw).Dur("flag_ack_wait", w.cfg.AckWait).
				Msg("consumer exists with another ack wait; using it (change it with the nats CLI)")
			w.heartbeat = min(w.heartbeat, aw/3)
		}
		cons = append(cons, c)
	}
	registered, err := w.cfg.Store.Workflows(ctx)
	if err != nil {
		return nil, fmt.Errorf("read registered workflows: %w", err)
	}
	for _, d := range w.cfg.Registry.All() {
		info := checkpoint.WorkflowInfo{Name: d.Name(), Version: d.Version(), FirstStep: d.FirstStep(), Steps: d.StepNames(), Signals: d.SignalNames(), InputSchema: d.Schema(), UpdatedAt: time.Now().UTC()}
		for _, n := range info.Signals {
			if g := d.SignalGroups(n); len(g) > 0 {
				if info.SignalGroups == nil {
					info.SignalGroups = map[string][]string{}
				}
				info.SignalGroups[n] = g
			}
		}
		w.keepSignalGroups(&info, registered)
		if err := w.cfg.Store.RegisterWorkflow(ctx, info); err != nil {
			return nil, fmt.Errorf("register workflow %s v%d: %w", d.Name(), d.Version(), err)
		}
	}
	return cons, nil
}

// keepSignalGroups keeps on info the groups that an earlier registration
// of the same workflow version restricted a signal to, where info
// restricts it to none: a worker built without them (an older build, a
// stray replica) must not open the signal to every token by registering
// last. Who may send a signal changes with the workflow's version.
func (w *Worker) keepSignalGroups(info *checkpoint.WorkflowInfo, registered []checkpoint.WorkflowInfo) {
	for _, old := range registered {
		if old.Name != info.Name || old.Version != info.Version {
			continue
		}
		for n, groups := range old.SignalGroups {
			if !slices.Contains(info.Signals, n) || len(info.SignalGroups[n]) > 0 {
				continue
			}
			if info.SignalGroups == nil {
				info.SignalGroups = map[string][]string{}
			}
			info.SignalGroups[n] = groups
			w.log.Warn().Str("workflow", info.Name).Int("version", info.Version).Str("signal", n).Strs("groups", groups).
				Msg("this worker declares no groups for the signal, an earlier registration of this version did: keeping them (bump the workflow's version to change who may send it)")
		}
	}
}

// Run pulls and executes steps until ctx ends, then stops taking work, waits
// up to DrainTimeout for in-flight steps and releases the rest.
func (w *Worker) Run(ctx context.Context) error {
	cons, err := w.Setup(ctx)
	if err != nil {
		return err
	}
	w.log.Info().Strs("workflows", w.cfg.Registry.Names()).Int("concurrency", w.cfg.Concurrency).
		Dur("ack_wait", w.cfg.AckWait).Msg("worker started")

	// Steps run under their own context so that a shutdown lets them finish;
	// it is cancelled only when the drain times out.
	stepCtx, cancelSteps := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSteps()

	// One goroutine per slot runs steps for the worker's lifetime: a step
	// starts on a goroutine whose stack has already grown, and a parked
	// run holds none of them.
	jobs := make(chan job)
	if err := w.openPool(ctx, jobs); err != nil {
		return err
	}
	defer w.closePool()
	var runners sync.WaitGroup
	for range w.cfg.Concurrency {
		runners.Add(1)
		go func() {
			defer runners.Done()
			for j := range jobs {
				began := time.Now()
				w.handle(stepCtx, j)
				j.clock.observe(time.Since(began))
				w.release(1)
			}
		}()
	}

	var pullers sync.WaitGroup
	// A puller's batch and prefetch leave a slot for each other workflow:
	// each may have one message waiting in this worker for a slot
	// (pull.go; waiting for messages holds none).
	maxBatch := max(1, w.cfg.Concurrency-(len(cons)-1))
	for i, name := range w.cfg.Registry.Names() {
		p := &puller{w: w, workflow: name, c: cons[i], maxBatch: maxBatch, jobs: jobs, clock: &stepClock{}}
		pullers.Add(1)
		go func() {
			defer pullers.Done()
			p.run(ctx)
		}()
	}
	pullers.Wait()
	w.closeQueue()
	close(jobs)

	done := make(chan struct{})
	go func() { runners.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.DrainTimeout):
		w.log.Warn().Msg("drain timeout: cancelling in-flight steps, they will be redelivered")
		cancelSteps()
		<-done
	}
	w.log.Info().Msg("worker stopped")
	return nil
}

func (w *Worker) release(n int) {
	for range n {
		<-w.sem
	}
}

// consumerGone reports whether err says a consumer was deleted (by an
// operator, or lost with the server's state), alone or with its stream.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}

// recreateConsumer creates a workflow's consumer again once it is gone
// (see consumerGone), rather than poll a consumer that is gone. It returns
// nil when the consumer could not be created (yet).
//
// The streams are provisioned first, with the replicas Setup uses: a
// consumer deleted with its stream can only come back on a new one.
// Existing streams are left as they are.
func (w *Worker) recreateConsumer(ctx context.Context, workflow string) jetstream.Consumer {
	if err := w.provision(ctx); err != nil {
		w.log.Warn().Err(err).Str("consumer", queue.ConsumerName(workflow)).Msg("consumer is gone and its streams could not be provisioned")
		return nil
	}
	c, cerr := w.ensureConsumer(ctx, workflow)
	if cerr != nil {
		w.log.Warn().Err(cerr).Str("consumer", queue.ConsumerName(workflow)).Msg("consumer is gone and could not be created again")
		return nil
	}
	w.log.Warn().Str("consumer", queue.ConsumerName(workflow)).Msg("consumer was gone; created it again")
	return c
}

// provision creates the streams the worker needs, leaving existing ones
// as they are.
func (w *Worker) provision(ctx context.Context) error {
	return queue.Provision(ctx, w.cfg.JetStream, queue.Config{Replicas: w.cfg.StreamReplicas})
}

// ensureConsumer returns workflow's shared consumer, created with this
// worker's settings if it does not exist.
func (w *Worker) ensureConsumer(ctx context.Context, workflow string) (jetstream.Consumer, error) {
	return queue.EnsureConsumer(ctx, w.cfg.JetStream, queue.ConsumerConfig(workflow, w.cfg.AckWait, w.cfg.MaxAckPending))
}
