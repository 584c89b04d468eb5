package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// StepFunc is one step of a workflow over state S. It receives the state the
// previous step produced (or the run's input on the first step) and returns
// where the run goes next. A returned error retries the step by its policy.
type StepFunc[S any] func(ctx context.Context, s *Context, state S) (Outcome[S], error)

// StepOption configures a step.
type StepOption func(*stepConfig)

type stepConfig struct {
	retry RetryPolicy
	uses  string
}

// Caps bound a run. A run that reaches one goes to the dead letters with
// the reason. Zero means no cap.
type Caps struct {
	// MaxSteps a run may take (an agent loop that never finishes).
	MaxSteps int
	// MaxAge from the run's start (waits included).
	MaxAge time.Duration
	// MaxSpend is the most a run may spend (in the unit steps report with
	// Context.Spend, e.g. USD of model tokens).
	MaxSpend float64
}

// WithRetry sets the step's retry policy.
func WithRetry(p RetryPolicy) StepOption { return func(c *stepConfig) { c.retry = p } }

// Uses says that the step holds a slot of the named resource while its
// body runs ("anthropic", "payments-api"): when the resource has a
// concurrency limit (`durable limit set NAME --concurrency N`), at most N
// steps that use it run at once across the fleet, and the others wait
// for a slot in the order they came, round-robin between the runs'
// fairness keys (Workflow.FairnessKey), holding no worker slot; with
// `--concurrency-per-key N`, at most N of them for each fairness key (a
// tenant). With no limit set, the step runs as any other. A step uses one
// resource (given twice, the last wins).
func Uses(resource string) StepOption { return func(c *stepConfig) { c.uses = resource } }

// stepDef is a step (fn) or a branch step (branch).
type stepDef[S any] struct {
	fn     StepFunc[S]
	branch func(ctx context.Context, s *Context, input json.RawMessage) (json.RawMessage, error)
	cfg    stepConfig
}

// Workflow is a named, versioned set of steps over state S. Names are
// persisted (runs and checkpoints refer to them); keep them stable.
type Workflow[S any] struct {
	name    string
	version int
	first   string
	steps   map[string]stepDef[S]
	order   []string
	init    func(input json.RawMessage) (S, error)
	caps    Caps
	signals []string
	// signalGroups: who may send each signal (Workflow.Signal); none: any token.
	signalGroups map[string][]string
	schema       json.RawMessage
	// refs are the names Workflow.Ref gave out, checked by Validate.
	refs []string
	// fairness computes a run's fairness key (Workflow.FairnessKey).
	fairness func(input json.RawMessage) (string, error)
	// priority computes a run's priority (Workflow.Priority).
	priority func(input json.RawMessage) (int, error)
	errs     []error
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether name can name a workflow or a step: letters,
// digits, '-' and '_' (workflow names become NATS subject tokens).
func ValidName(name string) bool { return nameRE.MatchString(name) }

// New starts a workflow definition. version pins runs: a run started on
// version 2 is only ever executed by code registered as version 2.
func New[S any](name string, version int) *Workflow[S] {
	w := &Workflow[S]{name: name, version: version, steps: map[string]stepDef[S]{}}
	if !ValidName(name) {
		w.errs = append(w.errs, fmt.Errorf("workflow name %q: use 1-64 letters, digits, '-' or '_'", name))
	}
	if version < 1 {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: version must be >= 1, got %d", name, version))
	}
	return w
}

// Step adds a step. The first step added is where runs start. Outcomes go
// to a step by its Ref (Workflow.Ref).
func (w *Workflow[S]) Step(name string, fn StepFunc[S], opts ...StepOption) *Workflow[S] {
	if fn == nil {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: step %q has no function", w.name, name))
	}
	w.add(name, stepDef[S]{fn: fn}, opts)
	if w.first == "" {
		w.first = name
	}
	return w
}

// add adds step or branch step d under name.
func (w *Workflow[S]) add(name string, d stepDef[S], opts []StepOption) {
	if !ValidName(name) {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: step name %q: use 1-64 letters, digits, '-' or '_'", w.name, name))
	}
	if _, dup := w.steps[name]; dup {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: step %q defined twice", w.name, name))
	}
	d.cfg = stepConfig{retry: DefaultRetry}
	for _, o := range opts {
		o(&d.cfg)
	}
	d.cfg.retry = d.cfg.retry.withDefaults()
	if d.cfg.uses != "" && !validResource(d.cfg.uses) {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: step %q uses %q: a resource is 1-64 letters, digits, '-', '_' or '.' (not first, last or twice in a row)", w.name, name, d.cfg.uses))
	}
	w.steps[name] = d
	w.order = append(w.order, name)
}

// Init sets how the run's input becomes the first state. By default the
// input JSON is decoded into S (an empty input gives the zero S).
func (w *Workflow[S]) Init(fn func(input json.RawMessage) (S, error)) *Workflow[S] {
	w.init = fn
	return w
}

// Invalid records a definition error found by whoever builds the workflow
// (pkg/agent: a tool named twice, a spend budget without a price):
// Validate reports it, so registering the workflow fails. nil is ignored.
func (w *Workflow[S]) Invalid(err error) *Workflow[S] {
	if err != nil {
		w.errs = append(w.errs, err)
	}
	return w
}

// WithCaps sets the run caps of the workflow.
func (w *Workflow[S]) WithCaps(c Caps) *Workflow[S] {
	if c.MaxSteps < 0 || c.MaxAge < 0 || c.MaxSpend < 0 {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: caps must not be negative", w.name))
	}
	w.caps = c
	return w
}

// Caps are the run caps of the workflow.
func (w *Workflow[S]) Caps() Caps { return w.caps }

// Name of the workflow.
func (w *Workflow[S]) Name() string { return w.name }

// Version of the workflow.
func (w *Workflow[S]) Version() int { return w.version }

// FirstStep is the step runs start at.
func (w *Workflow[S]) FirstStep() string { return w.first }

// StepNames lists the steps in the order they were added.
func (w *Workflow[S]) StepNames() []string { return append([]string(nil), w.order...) }

// Retry is the retry policy of a step (DefaultRetry for unknown names).
func (w *Workflow[S]) Retry(step string) RetryPolicy {
	if d, ok := w.steps[step]; ok {
		return d.cfg.retry
	}
	return DefaultRetry
}

// Validate reports definition errors: bad names, duplicate steps, no
// steps, a Ref (Workflow.Ref) that names no step.
func (w *Workflow[S]) Validate() error {
	errs := append([]error(nil), w.errs...)
	if len(w.order) == 0 {
		errs = append(errs, fmt.Errorf("workflow %s: no steps", w.name))
	}
	errs = append(errs, w.checkRefs()...)
	return errors.Join(errs...)
}

// ErrUnknownStep: a run names a step the workflow does not define.
var ErrUnknownStep = errors.New("unknown step")

// ErrBadState: the stored state (or run input) does not decode into S.
var ErrBadState = errors.New("state does not decode")

// Execute runs step name on the encoded state and encodes the outcome.
// The engine calls it; workflow authors don't need to.
func (w *Workflow[S]) Execute(ctx context.Context, s *Context, name string, state json.RawMessage, first bool) (Result, error) {
	d, ok := w.steps[name]
	if !ok || d.fn == nil {
		return Result{}, Permanent(fmt.Errorf("workflow %s v%d: %w %q", w.name, w.version, ErrUnknownStep, name))
	}
	var st S
	var err error
	switch {
	case first && w.init != nil:
		st, err = w.init(state)
	case len(state) > 0 && string(state) != "null":
		err = decodeState(state, &st)
	}
	if err != nil {
		return Result{}, Permanent(fmt.Errorf("workflow %s step %s: %w: %w", w.name, name, ErrBadState, err))
	}
	out, err := d.fn(ctx, s, st)
	if err != nil {
		return Result{}, err
	}
	if out.kind == 0 {
		return Result{}, Permanent(fmt.Errorf("workflow %s step %s returned an empty Outcome: use steps.Next, Complete, Fail, Park, SleepUntil, FanOut, StartChildren or AwaitSignal", w.name, name))
	}
	if out.kind == KindNext || out.kind == KindSleep || out.kind == KindChildren || out.kind == KindFanOut {
		if err := w.target(name, out.next, out.nextOf); err != nil {
			return Result{}, Permanent(err)
		}
	}
	var branches []checkpoint.Branch
	if out.kind == KindFanOut {
		if branches, err = w.fanOut(name, out.branches); err != nil {
			return Result{}, Permanent(err)
		}
	}
	var children []checkpoint.Child
	if out.kind == KindChildren {
		if children, err = w.childRuns(s, name, out.children); err != nil {
			return Result{}, Permanent(err)
		}
	}
	if out.kind == KindWait && out.signal != nil {
		if err := w.validSignal(name, out.signal); err != nil {
			return Result{}, Permanent(err)
		}
		return Result{Kind: KindWait, Signal: out.signal}, nil
	}
	if out.kind == KindWait {
		// A parked run keeps the state it had: the step runs again from it.
		if err := out.wait.validate(); err != nil {
			return Result{}, Permanent(fmt.Errorf("workflow %s step %s: %w", w.name, name, err))
		}
		return Result{Kind: KindWait, Wait: out.wait}, nil
	}
	enc, err := encodeState(out.state)
	if err != nil {
		return Result{}, Permanent(fmt.Errorf("workflow %s step %s: encode state: %w", w.name, name, err))
	}
	return Result{Kind: out.kind, Next: out.next, State: enc, Reason: out.reason, Wait: out.wait, Until: out.until, Branches: branches, Children: children}, nil
}

// Definition is a workflow as the engine sees it, whatever its state type.
// *Workflow[S] implements it.
type Definition interface {
	Name() string
	Version() int
	FirstStep() string
	StepNames() []string
	// SignalNames lists the signals the workflow waits for.
	SignalNames() []string
	// SignalGroups lists the token groups that may send signal name
	// through the approver's API, or nil when any token may.
	SignalGroups(name string) []string
	// Schema is the input schema runs are checked against when they
	// start (Workflow.InputSchema), or nil.
	Schema() json.RawMessage
	Retry(step string) RetryPolicy
	Caps() Caps
	Validate() error
	// Execute runs a step. first is set for the run's first step, whose
	// state is the run input.
	Execute(ctx context.Context, s *Context, step string, state json.RawMessage, first bool) (Result, error)
	// ExecuteBranch runs a branch step of a fan-out on its input and
	// returns its output.
	ExecuteBranch(ctx context.Context, s *Context, step string, input json.RawMessage) (json.RawMessage, error)
}

// Registry holds the workflows a worker runs, by name and version.
type Registry struct {
	mu   sync.RWMutex
	defs map[string]map[int]Definition
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{defs: map[string]map[int]Definition{}} }

// Register adds a workflow version. A definition error or a second
// registration of the same name and version is an error.
func (r *Registry) Register(d Definition) error {
	if err := d.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	vs := r.defs[d.Name()]
	if vs == nil {
		vs = map[int]Definition{}
		r.defs[d.Name()] = vs
	}
	if _, dup := vs[d.Version()]; dup {
		return fmt.Errorf("workflow %s v%d registered twice", d.Name(), d.Version())
	}
	vs[d.Version()] = d
	return nil
}

// MustRegister is Register that panics, for main's wiring.
func (r *Registry) MustRegister(defs ...Definition) *Registry {
	for _, d := range defs {
		if err := r.Register(d); err != nil {
			panic(err)
		}
	}
	return r
}

// Lookup finds a workflow version.
func (r *Registry) Lookup(name string, version int) (Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.defs[name][version]
	return d, ok
}

// Latest is the highest registered version of a workflow.
func (r *Registry) Latest(name string) (Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var best Definition
	for v, d := range r.defs[name] {
		if best == nil || v > best.Version() {
			best = d
		}
	}
	return best, best != nil
}

// Names lists registered workflow names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.defs))
	for n := range r.defs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// All lists every registered definition, by name then version.
func (r *Registry) All() []Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var all []Definition
	for _, vs := range r.defs {
		for _, d := range vs {
			all = append(all, d)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Name() != all[j].Name() {
			return all[i].Name() < all[j].Name()
		}
		return all[i].Version() < all[j].Version()
	})
	return all
}
