package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/transition"
)

const (
	// aheadRetries bounds the redeliveries of a message whose run is
	// unknown or behind it, before the message is given up.
	aheadRetries = 5
	// minDeliveryFuse: a step delivered more often than this (and 3× its
	// attempts) without finishing goes to the dead letters.
	minDeliveryFuse = 20
)

// tracer makes a span per delivery (durable.step), in the trace of the
// run the message carries; its outcome is the one Metrics.StepDone gets:
// committed, completed, failed, parked, replayed, stale, lost, retry,
// error, dead.
var tracer = otel.Tracer("github.com/durable-run/durable/pkg/worker")

var (
	attrAttempt = attribute.Key("durable.attempt")
	attrBranch  = attribute.Key("durable.branch")
	attrOutcome = attribute.Key("durable.outcome")
)

// underRoot is ctx with run's root span (durable.start) as the span the
// messages published under it carry: the next step's delivery is a child
// of the run's root, not of this delivery, so a run of two hundred steps
// is a list under its root in a trace view, not a staircase two hundred
// deep. Without a stored trace (started with tracing off) ctx is kept.
func underRoot(ctx context.Context, run checkpoint.Run) context.Context {
	root := trace.SpanContextFromContext(client.RunContext(context.Background(), run))
	if !root.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, root)
}

// transientDelay is the wait before redelivery after a store or publish
// error: exponential from 250ms to 30s. The step is retried, never lost,
// never acked uncommitted.
func (w *Worker) transientDelay(attempt int) time.Duration {
	d := 250 * time.Millisecond
	for i := 1; i < attempt && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// retryOf is the retry policy of step (or branch step) name of run's workflow.
func (w *Worker) retryOf(run checkpoint.Run, name string) steps.RetryPolicy {
	if def, ok := w.cfg.Registry.Lookup(run.Workflow, run.Version); ok {
		return def.Retry(name)
	}
	return steps.DefaultRetry
}

// rollForward advances a run record that lags its committed checkpoint cp.
func (w *Worker) rollForward(ctx context.Context, id string, cp checkpoint.Checkpoint) (checkpoint.Run, error) {
	for {
		run, err := w.cfg.Store.GetRun(ctx, id)
		if err != nil {
			return run, err
		}
		r := transition.Apply(run, transition.Commit{Checkpoint: cp}, time.Now())
		if r.Err != nil {
			return run, nil // it moved on meanwhile (or parked and was decided since)
		}
		stored, err := w.cfg.Store.UpdateRun(ctx, r.Run)
		if errors.Is(err, checkpoint.ErrConflict) {
			continue
		}
		if err != nil {
			return stored, err
		}
		log := zerolog.Ctx(ctx)
		log.Warn().Msg("run record rolled forward to its committed checkpoint")
		w.carryOut(ctx, *log, stored, r.Commands)
		return stored, nil
	}
}

// adoptable says whether checkpoint cp of the step at run's cursor is that
// step's result: committed under the run's current resume generation.
// Stores that write the checkpoint before the run record (JetStream KV on
// a one-replica file bucket, or a bucket written by an older version) can
// hold a checkpoint of an attempt whose commit lost to a park; once
// the run was decided and resumed, that result is stale and the step runs
// again.
func adoptable(run checkpoint.Run, cp *checkpoint.Checkpoint) bool {
	return cp != nil && cp.Gen == run.Resumes
}

// followCommitted continues from checkpoint cp of step n, which the store
// holds: the run record is rolled forward first if it lags the checkpoint,
// then n+1 is published if the run still waits for it, and n is acked.
func (w *Worker) followCommitted(ctx context.Context, d *delivery, run checkpoint.Run, cp checkpoint.Checkpoint, outcome string) {
	if run.Status == checkpoint.StatusRunning && run.Step == cp.Step {
		// The run record lags its checkpoint: a read that raced the
		// commit (reads of the KV store are not one snapshot), or a
		// commit whose second write was lost with its worker. Roll it
		// forward.
		var err error
		if run, err = w.rollForward(ctx, run.ID, cp); err != nil {
			w.retryTransient(d, "roll forward", err)
			return
		}
	}
	w.continueAfter(ctx, d, run, cp, outcome)
}

// delivery is one message being handled.
type delivery struct {
	msg     jetstream.Msg
	m       queue.StepMsg
	attempt int
	log     zerolog.Logger
	start   time.Time
	// name is the step the delivery runs: the run's step at the cursor,
	// or the branch step of a branch. Set once the run is loaded.
	name string
	// span is the delivery's span (a no-op one when tracing is off);
	// orphan: its message carried no trace context (published by a
	// version without tracing, or by hand), so the span links to the
	// run's trace once the run is loaded.
	span   trace.Span
	orphan bool
	// raw is the message as delivered (msg wraps it to stop the
	// heartbeat), and clock its workflow's: a delivery that queues for a
	// slot of a resource waits with them (flowslots.go). slot is the slot
	// the pool granted it while it was queued.
	raw   jetstream.Msg
	clock *stepClock
	slot  *flow.Slot
	// resource and waited: the delivery queued waited for a slot of
	// resource (its checkpoint says so).
	resource string
	waited   time.Duration
	// since is when the step's message was first stored: its own store
	// time, or for a renewed copy (renewed) the original's (sinceHeader).
	// tokens is what the delivery's calls met at their rate limits
	// (tokenwait.go).
	since   time.Time
	renewed bool
	tokens  tokenWaits
	// key is the run's fairness key, for rates per key (rateLimits.key).
	keyOnce sync.Once
	key     string
}

// handle runs the step protocol for one delivery (DESIGN.md, "Step protocol").
func (w *Worker) handle(ctx context.Context, j job) {
	msg := j.msg
	d := &delivery{msg: msg, attempt: 1, start: time.Now(), raw: msg, clock: j.clock, slot: j.slot}
	// A slot granted to this delivery goes back if it is not used (the
	// run moved while the delivery was queued).
	defer func() { d.slot.Release() }()
	if md, err := msg.Metadata(); err == nil {
		d.attempt = int(md.NumDelivered)
		d.since, d.renewed = firstStored(msg, md.Timestamp)
	}
	m, err := queue.DecodeStep(msg.Subject(), msg.Data())
	if err != nil {
		w.c.malformed.Add(1)
		w.log.Error().Err(err).Str("subject", msg.Subject()).Int("bytes", len(msg.Data())).Msg("terminating malformed step message")
		_ = msg.TermWithReason("malformed step message")
		w.done("", "", "malformed", d)
		return
	}
	d.m = m
	// The delivery is a span of the run's trace: the message carries the
	// context of the span that published it.
	d.orphan = len(msg.Headers()["traceparent"]) == 0
	ctx, d.span = tracer.Start(queue.ExtractTrace(ctx, msg.Headers()), "durable.step",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			client.AttrRunID.String(m.RunID), client.AttrWorkflow.String(m.Workflow), client.AttrStep.Int(m.At()),
			attrAttempt.Int(d.attempt)))
	defer d.span.End()
	if m.Branch > 0 {
		d.span.SetAttributes(attrBranch.Int(m.Branch))
	}
	lc := w.log.With().Str("run_id", m.RunID).Int("step", m.At()).Str("workflow", m.Workflow).Int("attempt", d.attempt)
	if m.Branch > 0 {
		lc = lc.Int("branch", m.Branch)
	}
	d.log = lc.Logger()
	ctx = d.log.WithContext(ctx)
	// The delivery is kept alive from here until it is acked or handed
	// back, not only while the step body runs: a slow load, commit or
	// publish (a store failing over) must not let the ack wait run out
	// and the step be delivered to a second worker meanwhile.
	w.at(ctx, Received, d)
	hb := startHeartbeat(msg, w.heartbeat, w.markAlive(m.RunID, d.start))
	defer hb.stop()
	d.msg = settling{Msg: msg, hb: hb}
	if m.Branch > 0 {
		w.branch(ctx, d)
		return
	}
	w.step(ctx, d)
}

// stepRef names what message m runs in the store: its step, or its
// branch of the fan-out whose join is m.BranchOf.
func stepRef(m queue.StepMsg) checkpoint.StepRef {
	if m.Branch > 0 {
		return checkpoint.AtBranch(m.BranchOf, m.Branch)
	}
	return checkpoint.AtStep(m.Step)
}

// settling is a delivery's message that stops its heartbeat before it is
// acked, handed back or terminated: no InProgress follows the outcome (the
// server would apply it to the message's next delivery, or stretch a
// delayed redelivery to a whole ack wait).
type settling struct {
	jetstream.Msg
	hb *heartbeat
}

func (m settling) Ack() error { m.hb.stop(); return m.Msg.Ack() }

func (m settling) DoubleAck(ctx context.Context) error { m.hb.stop(); return m.Msg.DoubleAck(ctx) }

func (m settling) Nak() error { m.hb.stop(); return m.Msg.Nak() }

func (m settling) NakWithDelay(delay time.Duration) error {
	m.hb.stop()
	return m.Msg.NakWithDelay(delay)
}

func (m settling) Term() error { m.hb.stop(); return m.Msg.Term() }

func (m settling) TermWithReason(reason string) error {
	m.hb.stop()
	return m.Msg.TermWithReason(reason)
}

// statusChanged publishes the run's new status as a lifecycle event. A
// failed publish is logged, not retried: the run record is the truth.
func (w *Worker) statusChanged(ctx context.Context, run checkpoint.Run) {
	if err := queue.PublishStatus(ctx, w.cfg.JetStream, run); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("status", string(run.Status)).Msg("status event not published")
	}
	// A child that ended may be the last its parent waits for. A resume
	// lost here is made by the scheduler's repair.
	if err := w.runs.ChildEnded(ctx, run); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("parent of an ended child run not resumed; the scheduler will")
	}
}

func outcomeOf(s checkpoint.Status) string {
	switch s {
	case checkpoint.StatusCompleted:
		return "completed"
	case checkpoint.StatusFailed:
		return "failed"
	}
	return "committed"
}

// continueAfter carries out what committed checkpoint cp owes the run as
// stored after it (transition.Follow: the next step, the fan-out's
// branches or join, or the children), then acks. Used after a commit and
// for replays of committed steps.
func (w *Worker) continueAfter(ctx context.Context, d *delivery, run checkpoint.Run, cp checkpoint.Checkpoint, outcome string) {
	// What the commit publishes, the same whether this worker committed
	// or met the commit again (transition.Follow): ids are minted there.
	owed := transition.Apply(run, transition.Follow{Checkpoint: cp}, time.Now()).Commands
	for _, cmd := range owed {
		switch cmd := cmd.(type) {
		case transition.StartChildren:
			// The step started child runs: create them (again: idempotent
			// by id) before acking, so that a crash after the commit
			// loses none.
			if err := w.runs.StartChildren(ctx, run, cmd.Checkpoint); err != nil {
				if errors.Is(err, client.ErrBadInput) || errors.Is(err, client.ErrUnknownWorkflow) {
					// Starting again cannot fix it: a person must look (and
					// redrive once a worker registers the child's workflow).
					w.deadLetter(ctx, d, run, err.Error())
					return
				}
				w.retryTransient(d, "start child runs", err)
				return
			}
			w.cfg.Metrics.ChildrenStarted(run.Workflow, len(cmd.Checkpoint.Children))
		case transition.PublishFanOut:
			// The step fanned out: its branches go on, or the join when
			// all are in. Never a message for step n+1 under its own id.
			var done []checkpoint.Checkpoint
			if outcome != "committed" { // a fresh commit has no branch done yet
				var err error
				if done, err = w.cfg.Store.BranchCheckpoints(ctx, run.ID, run.Step, len(cmd.Checkpoint.FanOut.Branches)); err != nil {
					w.retryTransient(d, "read branches", err)
					return
				}
			}
			if _, err := queue.PublishFanOut(underRoot(ctx, run), w.cfg.JetStream, run, cmd.Checkpoint, done, cmd.Suffix); err != nil {
				w.retryTransient(d, "publish branches", err)
				return
			}
		case transition.PublishStep:
			next := queue.StepMsg{RunID: run.ID, Workflow: run.Workflow, Step: run.Step, Name: run.StepName}
			if outcome == "committed" {
				// This worker's own commit: what the store holds is known.
				w.sticky.put(cmd.MsgID, run, cp)
			}
			if _, err := queue.PublishStep(underRoot(ctx, run), w.cfg.JetStream, next, cmd.MsgID); err != nil {
				w.sticky.drop(run.ID)
				w.retryTransient(d, "publish next", err)
				return
			}
			if outcome == "replayed" {
				w.c.republished.Add(1)
				d.log.Info().Msg("step already committed; published the next step again")
			}
		default:
			d.log.Error().Str("command", fmt.Sprintf("%T", cmd)).Msg("no way to carry out a command of the step's commit")
			continue
		}
		w.at(ctx, AfterPublish, d)
	}
	if outcome == "replayed" && len(owed) == 0 {
		d.log.Debug().Msg("step already committed; nothing to do")
	}
	w.ack(d)
	w.done(run.Workflow, cp.Name, outcome, d)
}

// afterLostCommit reloads after losing a commit and continues from the store.
func (w *Worker) afterLostCommit(ctx context.Context, d *delivery) {
	snap, err := w.cfg.Store.Load(ctx, d.m.RunID, checkpoint.AtStep(d.m.Step))
	if err != nil {
		w.retryTransient(d, "reload after lost commit", err)
		return
	}
	atCursor := snap.Run.Status == checkpoint.StatusRunning && snap.Run.Step == d.m.Step
	if snap.Current != nil && (!atCursor || adoptable(snap.Run, snap.Current)) {
		// The winner's run record may not be written yet (or ever, if its
		// worker died between the writes): follow its checkpoint.
		w.followCommitted(ctx, d, snap.Run, *snap.Current, "lost")
		return
	}
	if atCursor {
		// The run record moved but still waits for this step: run it again.
		w.retryTransient(d, "commit", errors.New("run record changed during the step"))
		return
	}
	w.ackStale(d, snap.Run.StepName)
}

// park stores the approval request and acks: the run now holds nothing in
// any worker until a decision publishes the step again.
func (w *Worker) park(ctx context.Context, d *delivery, run checkpoint.Run, res steps.Result) {
	if res.Signal != nil {
		w.parkForSignal(ctx, d, run, *res.Signal)
		return
	}
	req := res.Wait
	payload, err := json.Marshal(req.Payload)
	if err != nil {
		w.deadLetter(ctx, d, run, fmt.Sprintf("approval payload does not encode: %v", err))
		return
	}
	r := transition.Apply(run, transition.ParkForApproval{Step: d.m.Step, Payload: payload, Group: req.Group, EscalateTo: req.EscalateTo,
		OnExpiry: req.OnExpiry, Reminders: req.Reminders, TTL: req.TTL}, time.Now())
	if !w.storeChange(ctx, d, "park", r) {
		return
	}
	w.c.parked.Add(1)
	d.log.Info().Str("group", req.Group).Str("payload_sha256", r.Run.Wait.PayloadSHA256).Time("deadline", r.Run.Wait.Deadline).Msg("run parked for approval")
	w.ack(d)
	w.done(run.Workflow, run.StepName, "parked", d)
}

// storeChange stores what a worker's event did to the run (r, applied to
// the run as the delivery read it) and carries out its commands but a
// dead letter. A refused event, or a run changed since it was read (the
// store's compare-and-set), is handled as a commit that lost; a store
// error releases the delivery. It reports whether the change is stored.
func (w *Worker) storeChange(ctx context.Context, d *delivery, op string, r transition.Result) bool {
	if r.Err != nil {
		d.log.Debug().Err(r.Err).Str("op", op).Msg("the run changed since it was read")
		w.c.lost.Add(1)
		w.afterLostCommit(ctx, d)
		return false
	}
	stored, err := w.cfg.Store.UpdateRun(ctx, r.Run)
	if errors.Is(err, checkpoint.ErrConflict) {
		w.c.lost.Add(1)
		w.afterLostCommit(ctx, d)
		return false
	}
	if err != nil {
		w.retryTransient(d, op, err)
		return false
	}
	w.carryOut(ctx, d.log, stored, r.Commands)
	return true
}

// carryOut carries out the commands of a stored change of the run the
// worker makes. What follows on the step stream (the next step, the
// branches, the children) is the step protocol's (continueAfter), and a
// dead letter is published by deadLetter before the ack.
func (w *Worker) carryOut(ctx context.Context, log zerolog.Logger, stored checkpoint.Run, cmds []transition.Command) {
	for _, cmd := range cmds {
		switch cmd := cmd.(type) {
		case transition.PublishStatus:
			w.statusChanged(ctx, stored) // tells the parent too
		case transition.IndexDue:
			// The deadline index is a separate write (a global key); if
			// it is lost the scheduler's repair pass finds the waiting
			// run and indexes it.
			if err := w.cfg.Store.IndexDue(ctx, stored.ID, cmd.At); err != nil {
				log.Warn().Err(err).Msg("deadline index not written; the scheduler will repair it")
			}
		case transition.NotifyParent, transition.DeadLetter, transition.StartChildren, transition.PublishStep, transition.PublishFanOut:
			// A commit's publishes and children are the step protocol's
			// (continueAfter), the parent is told with the status event
			// (statusChanged), and deadLetter publishes the dead letter.
		default:
			log.Error().Str("command", fmt.Sprintf("%T", cmd)).Msg("no way to carry out a command of the run's change")
		}
	}
}

// stepFailed applies the step's retry policy to an error from its body.
func (w *Worker) stepFailed(ctx context.Context, d *delivery, def steps.Definition, run checkpoint.Run, sctx *steps.Context, err error) {
	policy := def.Retry(d.name)
	switch {
	case errors.Is(err, steps.ErrJournalMismatch) || sctx.JournalMismatch():
		d.log.Error().Err(err).Msg("journal mismatch: the step made a recorded call with different arguments")
		w.cfg.Metrics.JournalMismatch(run.Workflow, d.name)
		w.deadLetter(ctx, d, run, err.Error())
	case steps.IsPermanent(err):
		w.deadLetter(ctx, d, run, err.Error())
	case errors.As(err, new(*steps.JournalError)):
		// The store failed to record a call: an infrastructure fault, not
		// the step's. Retry without using up an attempt.
		w.retryTransient(d, "journal call", err)
	case isThrottled(err):
		// A call's rate limit: not the step's failure (throttle.go).
		w.throttled(ctx, d, run, err)
	case ctx.Err() != nil:
		// Shutdown cancelled the step: hand it back for another worker.
		_ = d.msg.Nak()
		w.done(run.Workflow, d.name, "error", d)
	default:
		// Failures of the body are counted in the store, not by deliveries:
		// redeliveries after crashes or store outages are not the step's
		// failures and must not use up its attempts.
		f := checkpoint.Failure{Attempt: d.attempt, Error: err.Error(), At: time.Now().UTC()}
		failures, ferr := w.cfg.Store.RecordFailure(ctx, run.ID, stepRef(d.m), f)
		if ferr != nil {
			w.retryTransient(d, "record failure", ferr)
			return
		}
		// A redrive grants the step a fresh set of attempts.
		if failures >= policy.Attempts*(run.Redrives+1) {
			w.deadLetter(ctx, d, run, fmt.Sprintf("%s failed %d times: %v", w.what(d), failures, err))
			return
		}
		delay := policy.Delay(failures)
		w.c.retried.Add(1)
		d.log.Warn().Err(err).Dur("retry_in", delay).Int("failures", failures).Int("attempts", policy.Attempts).Msg("step failed; will retry")
		_ = d.msg.NakWithDelay(delay)
		w.done(run.Workflow, d.name, "retry", d)
	}
}

// what names the delivery's step for people: "step pay", or "branch 3
// (pay) of the fan-out joined at step 4".
func (w *Worker) what(d *delivery) string {
	if d.m.Branch > 0 {
		return fmt.Sprintf("branch %d (%s) of the fan-out joined at step %d", d.m.Branch, d.name, d.m.BranchOf)
	}
	return "step " + d.name
}

// deadLetter marks the run dead, publishes the dead letter and acks. The
// run is marked first so that a duplicate delivery that loses the race
// publishes nothing for a healthy run. A branch's failure is first stored
// on the branch's own key (branchFailed).
func (w *Worker) deadLetter(ctx context.Context, d *delivery, run checkpoint.Run, reason string) {
	if d.m.Branch > 0 {
		w.branchFailed(ctx, d, run, reason)
		return
	}
	r := transition.Apply(run, transition.Die{Reason: reason}, time.Now())
	if r.Err != nil {
		w.afterLostCommit(ctx, d)
		return
	}
	stored, err := w.cfg.Store.UpdateRun(ctx, r.Run)
	if errors.Is(err, checkpoint.ErrConflict) {
		w.afterLostCommit(ctx, d)
		return
	}
	if err != nil {
		w.retryTransient(d, "mark dead", err)
		return
	}
	w.markedDead(ctx, d, stored)
}

// markedDead counts and announces the run this delivery marked dead, then
// publishes its dead letter and acks.
func (w *Worker) markedDead(ctx context.Context, d *delivery, stored checkpoint.Run) {
	w.c.dead.Add(1)
	w.cfg.Metrics.DeadLettered(stored.Workflow, d.name)
	w.statusChanged(ctx, stored)
	d.log.Error().Str("reason", stored.Error).Msg("run dead-lettered")
	w.at(ctx, DeadMarked, d)
	w.publishDeadLetter(ctx, d, stored)
}

// publishDeadLetter publishes the dead letter of a dead run and acks.
func (w *Worker) publishDeadLetter(ctx context.Context, d *delivery, run checkpoint.Run) {
	dl := queue.DeadLetter{RunID: run.ID, Workflow: run.Workflow, Step: d.m.At(), StepName: run.StepName, Reason: run.Error, Attempt: d.attempt, At: run.UpdatedAt}
	if err := queue.PublishDeadLetter(ctx, w.cfg.JetStream, run, dl); err != nil {
		w.retryTransient(d, "dead letter", err)
		return
	}
	w.ack(d)
	w.done(run.Workflow, d.name, "dead", d)
}

func (w *Worker) ackStale(d *delivery, step string) {
	w.c.stale.Add(1)
	d.log.Debug().Msg("stale step message acked")
	w.ack(d)
	w.done(d.m.Workflow, step, "stale", d)
}

// retryTransient releases the delivery for redelivery after a store or
// publish error. The message is never acked while its step is uncommitted.
func (w *Worker) retryTransient(d *delivery, op string, err error) {
	w.c.errors.Add(1)
	d.log.Warn().Err(err).Str("op", op).Msg("transient error; step released for redelivery")
	_ = d.msg.NakWithDelay(w.transientDelay(d.attempt))
	w.done(d.m.Workflow, "", "error", d)
}

func (w *Worker) ack(d *delivery) {
	if err := d.msg.Ack(); err != nil {
		// The ack may be lost: the redelivery finds the checkpoint.
		d.log.Warn().Err(err).Msg("ack failed")
	}
}

func (w *Worker) done(workflow, step, outcome string, d *delivery) {
	took := time.Since(d.start)
	if tm, ok := w.cfg.Metrics.(TracedMetrics); ok && d.span != nil && d.span.SpanContext().IsSampled() {
		tm.StepDoneInTrace(workflow, step, outcome, took, d.span.SpanContext().TraceID().String())
	} else {
		w.cfg.Metrics.StepDone(workflow, step, outcome, took)
	}
	if d.span != nil && d.span.IsRecording() {
		d.span.SetAttributes(client.AttrStepName.String(step), attrOutcome.String(outcome))
		if outcome == "error" || outcome == "dead" || outcome == "malformed" {
			d.span.SetStatus(codes.Error, outcome)
		}
	}
}

// reportCommit tells Metrics about checkpoint cp of size bytes that this
// worker committed; prev is the step before's checkpoint, when loaded.
func (w *Worker) reportCommit(run checkpoint.Run, cp checkpoint.Checkpoint, size int, prev *checkpoint.Checkpoint) {
	growth := 0
	if prev != nil {
		growth = size - prev.Size()
	}
	w.cfg.Metrics.CheckpointCommitted(run.Workflow, cp.Name, size, growth)
	replayed := 0
	for _, c := range cp.Journal {
		if c.Replayed {
			replayed++
		}
	}
	if replayed > 0 {
		w.cfg.Metrics.CallsReplayed(run.Workflow, cp.Name, replayed)
	}
	for _, e := range cp.Effects {
		if e.Replayed {
			w.cfg.Metrics.EffectReplayed(run.Workflow, effectTool(e.Key, run.ID, cp.Step, cp.Name))
		}
	}
}

// effectTool names the tool of an effect key for metrics: "<name>" of
// "<run>:step<n>:<name>", the step name for the step's own key or a
// branch's ("<run>:step<n>.<i>", stepName then the branch step's), "other"
// for a key of another form (never the key itself: it holds the run id).
func effectTool(key, run string, step int, stepName string) string {
	own := run + ":step" + strconv.Itoa(step)
	switch {
	case key == own, strings.HasPrefix(key, own+"."): // a step's key, a branch's
		return stepName
	case strings.HasPrefix(key, own+":"):
		return key[len(own)+1:]
	}
	return "other"
}

// execute runs the step body (handle heartbeats the delivery meanwhile).
func (w *Worker) execute(ctx context.Context, d *delivery, def steps.Definition, sctx *steps.Context, name string, state json.RawMessage, first bool) (res steps.Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("step %s panicked: %v", name, p)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, w.cfg.StepTimeout)
	defer cancel()
	return def.Execute(ctx, sctx, name, state, first)
}

// heartbeat tells the server every interval that a delivery is still in
// progress, from a timer rather than a goroutine per step.
type heartbeat struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func startHeartbeat(msg jetstream.Msg, every time.Duration, mark func()) *heartbeat {
	h := &heartbeat{}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t = time.AfterFunc(every, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.stopped {
			return
		}
		_ = msg.InProgress()
		if mark != nil {
			mark()
		}
		h.t.Reset(every)
	})
	return h
}

// markAlive returns what a heartbeat of a delivery of run id records in
// the store besides telling the server: a liveness mark, which the
// scheduler's repair counts as progress (nil when the store keeps none).
// Only deliveries that outlive a heartbeat interval write one, and none
// past the step timeout (with the ack wait for the commit and publish
// after it): a body that ignores its context and hangs is left to the
// repair, as a lost message is.
func (w *Worker) markAlive(id string, start time.Time) func() {
	mark := w.marker(id)
	if mark == nil {
		return nil
	}
	return func() {
		if time.Since(start) <= w.cfg.StepTimeout+w.cfg.AckWait {
			mark()
		}
	}
}

// marker returns the write of a liveness mark of run id (nil when the
// store keeps none). A queued delivery's heartbeat writes it with no
// bound (flowslots.go): no body runs that could hang.
func (w *Worker) marker(id string) func() {
	lv, ok := w.cfg.Store.(checkpoint.Liveness)
	if !ok {
		return nil
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), markTimeout)
		defer cancel()
		if err := lv.MarkAlive(ctx, id, time.Now()); err != nil {
			w.log.Debug().Err(err).Str("run_id", id).Msg("liveness mark not written")
		}
	}
}

// markTimeout bounds a liveness mark's write: a heartbeat holds up the
// delivery's ack while it writes.
const markTimeout = 2 * time.Second

// stop ends the heartbeats; none is sent once it returns.
func (h *heartbeat) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	h.t.Stop()
}

// capReached says which of the workflow's run caps the run has reached
// before running another step or branch, or "". branchSpend is spent by
// branches of the fan-out at the cursor and not yet in run.Spend.
func capReached(def steps.Definition, run checkpoint.Run, branchSpend float64) string {
	caps := def.Caps()
	spent := run.Spend + branchSpend
	switch {
	case caps.MaxSteps > 0 && run.Steps >= caps.MaxSteps:
		return fmt.Sprintf("max steps reached: %d steps taken, the cap is %d", run.Steps, caps.MaxSteps)
	case caps.MaxSpend > 0 && spent >= caps.MaxSpend && branchSpend != 0:
		return fmt.Sprintf("max spend reached: %.4g spent, %.4g of it by the fan-out's branches, the cap is %.4g", spent, branchSpend, caps.MaxSpend)
	case caps.MaxSpend > 0 && spent >= caps.MaxSpend:
		return fmt.Sprintf("max spend reached: %.4g spent, the cap is %.4g", spent, caps.MaxSpend)
	case caps.MaxAge > 0 && time.Since(run.CreatedAt) > caps.MaxAge:
		return fmt.Sprintf("max age reached: started %s ago, the cap is %s", time.Since(run.CreatedAt).Round(time.Second), caps.MaxAge)
	}
	return ""
}

// approvalsFor returns the decisions recorded for step n of run.
func approvalsFor(run checkpoint.Run, n int) []checkpoint.Approval {
	var out []checkpoint.Approval
	for _, a := range run.Approvals {
		if a.Step == n {
			out = append(out, a)
		}
	}
	return out
}

// recorder binds the store's journal to one step and one generation of
// the run. A generation starts with every resume after a decision: a step
// that parked runs again from its start and must re-read its facts, so
// the calls recorded before it parked are not replayed to it.
type recorder struct {
	w   *Worker
	d   *delivery
	gen int
}

// RecordCall journals rec under the run's generation. The hooks see the
// call returned (AfterCall) and, when this attempt's result is the one
// stored, recorded (AfterRecord).
func (r recorder) RecordCall(ctx context.Context, rec checkpoint.CallRecord) (checkpoint.CallRecord, error) {
	r.w.at(ctx, AfterCall, r.d)
	name := rec.Name
	rec.Name = genPrefix(r.gen) + name
	stored, err := r.w.cfg.Store.RecordCall(ctx, r.d.m.RunID, stepRef(r.d.m), rec)
	if err == nil && string(stored.Result) == string(rec.Result) && stored.ArgsSHA256 == rec.ArgsSHA256 {
		r.w.at(ctx, AfterRecord, r.d)
	}
	stored.Name = name
	return stored, err
}

func genPrefix(gen int) string {
	if gen == 0 {
		return ""
	}
	return "@" + strconv.Itoa(gen) + "/"
}

// journalOf keeps the records of generation gen, with their plain names.
func journalOf(all []checkpoint.CallRecord, gen int) []checkpoint.CallRecord {
	prefix := genPrefix(gen)
	var out []checkpoint.CallRecord
	for _, r := range all {
		switch {
		case prefix == "" && !strings.HasPrefix(r.Name, "@"):
			out = append(out, r)
		case prefix != "" && strings.HasPrefix(r.Name, prefix):
			r.Name = strings.TrimPrefix(r.Name, prefix)
			out = append(out, r)
		}
	}
	return out
}
