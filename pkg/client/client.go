package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/transition"
)

var (
	// ErrUnknownWorkflow: no worker has registered the workflow.
	ErrUnknownWorkflow = errors.New("unknown workflow")
	// ErrBadInput: the run input is not a JSON object.
	ErrBadInput = errors.New("bad run input")
	// ErrBadRunID: the run id can't be a subject token.
	ErrBadRunID = queue.ErrBadID
	// ErrRunIDTaken: the id belongs to a different run (other workflow or input).
	ErrRunIDTaken = errors.New("run id taken by a different run")
	// ErrNotWaiting: the run is not parked for approval.
	ErrNotWaiting = transition.ErrNotWaiting
	// ErrStaleHash: the approval names a payload other than the one pending.
	ErrStaleHash = transition.ErrStaleHash
	// ErrForbidden: the decider is not in the group the request names, or
	// the four-eyes rule forbids them (they started the run).
	ErrForbidden = transition.ErrForbidden
	// ErrWrongStep: the decision names a step other than the parked one.
	ErrWrongStep = transition.ErrWrongStep
	// ErrNotActive: the run already ended.
	ErrNotActive = transition.ErrNotActive
	// ErrNotFound: no such run.
	ErrNotFound = checkpoint.ErrNotFound
)

// Client is a handle on a durable deployment.
type Client struct {
	js        jetstream.JetStream
	store     checkpoint.Store
	workflows workflowCache
	archive   blob.Store // WithArchive; nil: the bucket ArchiveBucket
}

// workflowsTTL is how long Start trusts the registered workflows it read
// last: a run starts on its workflow's newest version as registered up to
// that long before. A workflow not among them is read again at once.
const workflowsTTL = time.Second

// workflowCache holds the registered workflows last read, so that a
// client starting many runs reads them once a second, not once per run.
type workflowCache struct {
	mu    sync.Mutex
	at    time.Time
	infos []checkpoint.WorkflowInfo
}

// get returns the cached workflows if read less than workflowsTTL ago.
func (w *workflowCache) get() ([]checkpoint.WorkflowInfo, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.infos, w.infos != nil && time.Since(w.at) < workflowsTTL
}

func (w *workflowCache) put(infos []checkpoint.WorkflowInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.infos, w.at = infos, time.Now()
}

// New returns a client over the step stream and the store: those of the
// workers, e.g. the JetStream and Store of a pkg/service Session opened with
// the same --nats and --redis settings. A JetStream of your own should be
// made with jetstream.WithPublishAsyncTimeout(queue.PublishTimeout): the
// client publishes asynchronously and awaits the PubAcks (queue.PublishAll).
func New(js jetstream.JetStream, store checkpoint.Store, opts ...Option) *Client {
	c := &Client{js: js, store: store}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Store is the client's checkpoint store.
func (c *Client) Store() checkpoint.Store { return c.store }

// StartRequest starts a run.
type StartRequest struct {
	Workflow string
	RunID    string
	// Input is the run's input, which the workflow's first step starts
	// from: a value of the workflow's input type (a struct, a map), encoded
	// as JSON, or JSON itself as json.RawMessage or []byte. It must be a
	// JSON object; nil means {}.
	Input any
	// By names who started the run (recorded, and used by a four-eyes rule).
	By string
	// Parent is set by the worker when a step starts child runs; leave it
	// nil. An existing run of the same id is the child only if it has
	// this parent: a redelivery never starts a second child, and never
	// adopts a stranger's run.
	Parent *checkpoint.ParentRef
}

// Start creates the run and publishes its first step. Starting an id that
// exists with the same workflow and input returns the existing run with
// created false and does not restart it.
func (c *Client) Start(ctx context.Context, req StartRequest) (run checkpoint.Run, created bool, err error) {
	// The run's trace starts here, linked to the caller's span if any.
	ctx, span := tracer.Start(ctx, "durable.start", trace.WithNewRoot(), trace.WithLinks(trace.LinkFromContext(ctx)),
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(AttrRunID.String(req.RunID), AttrWorkflow.String(req.Workflow)))
	defer func() { endSpan(span, err) }()
	if err := queue.ValidateRunID(req.RunID); err != nil {
		return run, false, err
	}
	input, err := encodeInput(req.Input)
	if err != nil {
		return run, false, err
	}
	info, err := c.workflow(ctx, req.Workflow)
	if err != nil {
		return run, false, err
	}
	if err := c.checkNewInput(ctx, req.RunID, info, input); err != nil {
		return run, false, err
	}
	now := time.Now().UTC()
	run = checkpoint.Run{
		ID: req.RunID, Workflow: info.Name, Version: info.Version,
		Status: checkpoint.StatusRunning, Step: 1, StepName: info.FirstStep,
		Input: input, StartedBy: req.By, CreatedAt: now, UpdatedAt: now, Parent: req.Parent,
		Trace: traceparent(ctx),
	}
	stored, err := c.store.CreateRun(ctx, run)
	var purged *checkpoint.PurgedError
	switch {
	case errors.As(err, &purged):
		// Its tombstone keeps the id taken: a key derived from it is
		// never presented for a second run.
		return stored, false, fmt.Errorf("run %s: %w: %w; choose another id", req.RunID, ErrRunIDTaken, purged)
	case errors.Is(err, checkpoint.ErrRunExists):
		if stored.Workflow != run.Workflow || !jsonEqual(stored.Input, run.Input) || !sameParent(stored.Parent, req.Parent) {
			return stored, false, fmt.Errorf("run %s: %w (workflow %s, started %s%s); choose another id", req.RunID, ErrRunIDTaken, stored.Workflow, stored.CreatedAt.Format(time.RFC3339), parentNote(stored.Parent))
		}
		// The first publish may have been lost: publishing step 1 again is
		// harmless (same message id, and the protocol ignores replays).
		if p, ok := firstStep(stored, false, now); ok {
			if err := c.publish(RunContext(ctx, stored), stored, p.MsgID); err != nil {
				return stored, false, err
			}
		}
		return stored, false, nil
	case err != nil:
		return run, false, fmt.Errorf("create run %s: %w", req.RunID, err)
	}
	// The event goes first: the step's own events must follow it.
	if p, ok := firstStep(stored, true, now); ok {
		if err := c.publishAfterStatus(ctx, stored, p.MsgID); err != nil {
			return stored, true, fmt.Errorf("%s: %w", p.Lost, err)
		}
	}
	return stored, true, nil
}

// firstStep is the publish of step 1 that the start of run owes
// (transition.Start; created: CreateRun stored it now), if any. The
// status event a created run also owes goes first (publishAfterStatus).
func firstStep(run checkpoint.Run, created bool, now time.Time) (transition.PublishStep, bool) {
	for _, cmd := range transition.Apply(run, transition.Start{Created: created}, now).Commands {
		if p, ok := cmd.(transition.PublishStep); ok {
			return p, true
		}
	}
	return transition.PublishStep{}, false
}

// checkNewInput checks the input of a run that does not exist yet
// against its workflow's input schema. A run that exists was checked when
// it started: a schema deployed since must not refuse its redelivery.
func (c *Client) checkNewInput(ctx context.Context, id string, info checkpoint.WorkflowInfo, input json.RawMessage) error {
	if len(info.InputSchema) == 0 {
		return nil
	}
	if _, err := c.store.GetRun(ctx, id); !errors.Is(err, checkpoint.ErrNotFound) {
		return nil
	}
	if err := steps.CheckInput(info.InputSchema, input); err != nil {
		return fmt.Errorf("%w: %w (workflow %s v%d)", ErrBadInput, err, info.Name, info.Version)
	}
	return nil
}

func sameParent(a, b *checkpoint.ParentRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func parentNote(p *checkpoint.ParentRef) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf(", a child of %s step %d", p.RunID, p.Step)
}

func (c *Client) workflow(ctx context.Context, name string) (checkpoint.WorkflowInfo, error) {
	if infos, fresh := c.workflows.get(); fresh {
		if best, ok := newest(infos, name); ok {
			return best, nil
		}
	}
	infos, err := c.store.Workflows(ctx)
	if err != nil {
		return checkpoint.WorkflowInfo{}, fmt.Errorf("read registered workflows: %w", err)
	}
	c.workflows.put(infos)
	if best, ok := newest(infos, name); ok {
		return best, nil
	}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	sort.Strings(names)
	return checkpoint.WorkflowInfo{}, fmt.Errorf("workflow %q: %w; workflows registered by workers: %v (a worker registers its workflows when it starts)", name, ErrUnknownWorkflow, dedupe(names))
}

// newest is the newest version of workflow name among infos.
func newest(infos []checkpoint.WorkflowInfo, name string) (checkpoint.WorkflowInfo, bool) {
	var best *checkpoint.WorkflowInfo
	for i, in := range infos {
		if in.Name == name && (best == nil || in.Version > best.Version) {
			best = &infos[i]
		}
	}
	if best == nil {
		return checkpoint.WorkflowInfo{}, false
	}
	return *best, true
}

// publish publishes the step at run's cursor under msgID.
func (c *Client) publish(ctx context.Context, run checkpoint.Run, msgID string) error {
	_, err := c.publishNew(ctx, run, msgID)
	return err
}

// publishAfterStatus publishes run's status event, then the step at its
// cursor under msgID once the event is stored (or refused): the step's own
// events must follow it, and streams store what one connection sends
// independently. As with statusChanged, a lost event is no error; a lost
// step is.
func (c *Client) publishAfterStatus(ctx context.Context, run checkpoint.Run, msgID string) error {
	if status, err := queue.StatusMessage(run); err == nil {
		queue.PublishAll(ctx, c.js, status)
	}
	return c.publish(ctx, run, msgID)
}

// publishNew is publish that says whether the stream took the message as
// new (see queue.PublishStep).
func (c *Client) publishNew(ctx context.Context, run checkpoint.Run, msgID string) (bool, error) {
	m := queue.StepMsg{RunID: run.ID, Workflow: run.Workflow, Step: run.Step, Name: run.StepName}
	return queue.PublishStep(ctx, c.js, m, msgID)
}

// Channels through which a decision arrives.
const (
	ChannelCLI       = "cli"
	ChannelAPI       = "api"
	ChannelPage      = "page"
	ChannelEvent     = "event"
	ChannelScheduler = transition.ChannelScheduler
)

// Decision approves or rejects a parked run.
type Decision struct {
	RunID  string
	By     string
	Reject bool
	Reason string
	// Channel the decision came through (ChannelCLI, ...).
	Channel string
	// PayloadSHA256, when set, must name the pending payload.
	PayloadSHA256 string
	// Step, when set, must be the parked step.
	Step int
	// Groups, when not nil, are the decider's groups: one must be the
	// group the request names. Nil means an operator (the CLI), unchecked.
	Groups []string
	// FourEyes refuses a decision by the identity that started the run.
	FourEyes bool
}

// Decide records the decision on the parked run and resumes it: the parked
// step runs again on any worker with the decision in its context.
func (c *Client) Decide(ctx context.Context, d Decision) (run checkpoint.Run, err error) {
	verdict := checkpoint.DecisionApproved
	if d.Reject {
		verdict = checkpoint.DecisionRejected
	}
	ctx, span := c.actionSpan(ctx, d.RunID, "durable.decision", attribute.String("durable.decision", string(verdict)),
		attribute.String("durable.by", d.By), attribute.String("durable.channel", d.Channel))
	defer func() { endSpan(span, err) }()
	return c.decide(ctx, d)
}

func (c *Client) decide(ctx context.Context, d Decision) (checkpoint.Run, error) {
	if d.By == "" {
		return checkpoint.Run{}, errors.New("a decision needs who took it")
	}
	return c.change(ctx, d.RunID, transition.Decide{
		Step: d.Step, PayloadSHA256: d.PayloadSHA256, Groups: d.Groups, FourEyes: d.FourEyes,
		Reject: d.Reject, By: d.By, Channel: d.Channel, Reason: d.Reason,
	})
}

// change applies ev to run id and stores the result, compare-and-set on
// the revision it read (a writer that came first makes it read the run
// and apply the event again), then carries out the event's commands with
// the stored run. A refused event stores nothing, and its commands (a
// resume owed by an earlier change) still go.
func (c *Client) change(ctx context.Context, id string, ev transition.Event) (checkpoint.Run, error) {
	run, _, err := c.changeChecked(ctx, id, ev, nil)
	return run, err
}

// changeChecked is change that, before it stores, refuses with what check
// says of the run read (what the event cannot know: the workflow's
// registration). It returns the event's result too.
func (c *Client) changeChecked(ctx context.Context, id string, ev transition.Event, check func(checkpoint.Run) error) (checkpoint.Run, transition.Result, error) {
	return c.changeOf(ctx, id, func(checkpoint.Run) (transition.Event, error) { return ev, nil }, check)
}

// changeOf is changeChecked with the event made from the run read, by
// what else eventOf reads (a run's children); a nil event changes
// nothing.
func (c *Client) changeOf(ctx context.Context, id string, eventOf func(checkpoint.Run) (transition.Event, error), check func(checkpoint.Run) error) (checkpoint.Run, transition.Result, error) {
	for {
		run, err := c.store.GetRun(ctx, id)
		if err != nil {
			return run, transition.Result{}, fmt.Errorf("run %s: %w", id, err)
		}
		ev, err := eventOf(run)
		if ev == nil || err != nil {
			return run, transition.Result{Run: run}, err
		}
		r := transition.Apply(run, ev, time.Now())
		stored := r.Run
		if r.Store && check != nil {
			if err := check(run); err != nil {
				return run, transition.Result{Run: run, Err: err}, err
			}
		}
		if r.Store {
			stored, err = c.store.UpdateRun(ctx, r.Run)
			if errors.Is(err, checkpoint.ErrConflict) {
				continue // changed meanwhile: look again
			}
			if err != nil {
				// Nothing stored: no run (the approver answers 500 on that).
				return checkpoint.Run{}, r, fmt.Errorf("store run %s: %w", id, err)
			}
		}
		// A follow-up that failed is what to report, also of a refused
		// event: a cancel of a cancelled run that finishes its cascade.
		if err := c.carryOut(ctx, stored, r.Commands); err != nil {
			return stored, r, err
		}
		return stored, r, r.Err
	}
}

// carryOut carries out the commands of a change, in order, with the
// stored run, and joins what failed.
func (c *Client) carryOut(ctx context.Context, run checkpoint.Run, cmds []transition.Command) error {
	var errs []error
	for _, cmd := range cmds {
		switch cmd := cmd.(type) {
		case transition.PublishStatus:
			c.statusChanged(ctx, run)
		case transition.PublishStep:
			if err := c.publish(ctx, run, cmd.MsgID); err != nil && !cmd.BestEffort {
				errs = append(errs, fmt.Errorf("%s: %w", cmd.Lost, err))
			}
		case transition.CancelChildren:
			errs = append(errs, c.cancelChildren(ctx, run, cmd.By, action{channel: cmd.Channel}))
		case transition.NotifyParent:
			errs = append(errs, c.ChildEnded(ctx, run))
		case transition.StartChildren:
			errs = append(errs, c.StartChildren(ctx, run, cmd.Checkpoint))
		case transition.PublishFanOut:
			errs = append(errs, c.publishFanOut(ctx, run, cmd))
		default:
			errs = append(errs, fmt.Errorf("run %s: no way to carry out %T", run.ID, cmd))
		}
	}
	return errors.Join(errs...)
}

// ActionOption qualifies an operator's action (Cancel, Redrive).
type ActionOption func(*action)

type action struct{ channel string }

// Via records the channel the action came through (ChannelAPI,
// ChannelPage, ...) in the run's audit. Default ChannelCLI.
func Via(channel string) ActionOption {
	return func(a *action) { a.channel = channel }
}

func actionOf(opts []ActionOption) action {
	a := action{channel: ChannelCLI}
	for _, o := range opts {
		o(&a)
	}
	return a
}

// Cancel stops a running or waiting run and records who cancelled it, and
// through which channel, in its audit. A step in flight is discarded at
// its commit.
func (c *Client) Cancel(ctx context.Context, id, by string, opts ...ActionOption) (run checkpoint.Run, err error) {
	a := actionOf(opts)
	ctx, span := c.actionSpan(ctx, id, "durable.cancel", attribute.String("durable.by", by), attribute.String("durable.channel", a.channel))
	defer func() { endSpan(span, err) }()
	return c.change(ctx, id, transition.Cancel{By: by, Channel: a.channel})
}

// statusChanged publishes a run's new status as a lifecycle event
// (queue.StatusEvent). Best effort: the run record is the truth, and the
// change it reports is already stored.
func (c *Client) statusChanged(ctx context.Context, run checkpoint.Run) {
	_ = queue.PublishStatus(ctx, c.js, run)
}

// encodeInput encodes a start request's input as a compact JSON object.
func encodeInput(in any) (json.RawMessage, error) {
	switch v := in.(type) {
	case nil:
		return normalizeInput(nil)
	case json.RawMessage:
		return normalizeInput(v)
	case []byte:
		return normalizeInput(v)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("%w: encode %T: %v", ErrBadInput, in, err)
	}
	return normalizeInput(b)
}

// normalizeInput checks the run input is a JSON object and compacts it.
// Only JSON's own whitespace is trimmed: bytes.TrimSpace would also drop
// Unicode spaces (U+00A0, U+0085, ...) and accept input that no JSON
// decoder reads.
func normalizeInput(in json.RawMessage) (json.RawMessage, error) {
	in = bytes.Trim(in, " \t\r\n")
	if len(in) == 0 {
		return json.RawMessage(`{}`), nil
	}
	var obj map[string]any
	if err := json.Unmarshal(in, &obj); err != nil || obj == nil {
		why := "null"
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("%w: %s; the input must be a JSON object", ErrBadInput, why)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, in); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	return buf.Bytes(), nil
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// RecordRefusal appends a refused approval (wrong hash, step or group,
// or a run not waiting) to the run's audit. The decision state does not
// change. Past transition.MaxRefusals entries it records nothing more.
func (c *Client) RecordRefusal(ctx context.Context, id string, e checkpoint.AuditEntry) error {
	_, err := c.change(ctx, id, transition.Refuse{Entry: e})
	return err
}
