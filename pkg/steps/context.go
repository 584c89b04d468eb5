package steps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// Recorder stores a journaled call first-writer-wins and returns the record
// that is stored. The worker binds it to the checkpoint store.
type Recorder interface {
	RecordCall(ctx context.Context, rec checkpoint.CallRecord) (checkpoint.CallRecord, error)
}

// ContextConfig builds a Context. The worker fills it; tests of a workflow's
// steps can fill it by hand.
type ContextConfig struct {
	RunID    string
	Workflow string
	Version  int
	Step     int
	StepName string
	// Branch is i when the context runs branch i of the fan-out whose join
	// is Step, 0 in a step.
	Branch int
	// BranchOutputs are the outputs of the branches a join step follows,
	// in branch order; nil in any other step.
	BranchOutputs []json.RawMessage
	// BranchSteps name the branch step of each output, in branch order
	// (BranchRef.Outputs reads its own); nil takes every output for any
	// branch step.
	BranchSteps []string
	// Children are how the child runs the step before started ended, in
	// the order they were started; nil in any other step.
	Children []ChildResult
	// Signals are the signals delivered to the run that the step may
	// read: those no step consumed yet, and those this step consumed in
	// this generation, oldest first.
	Signals []checkpoint.Signal
	// Attempt is the delivery of this step (1 = first).
	Attempt int
	// Journal holds calls recorded by earlier attempts of this step.
	Journal []checkpoint.CallRecord
	// Recorder stores new calls. Nil keeps them in memory only.
	Recorder Recorder
	// Approvals are the decisions recorded for this step, oldest first.
	Approvals []checkpoint.Approval
	// Heartbeat tells the queue the step is still alive. Optional.
	Heartbeat func()
	// BlobStore keeps the blobs of PutBlob and GetBlob. Optional: without
	// one they fail with ErrNoBlobStore. Tests of a workflow's steps can
	// use blob.NewMemory.
	BlobStore blob.Store
	// RateLimits takes the tokens of the resources calls name (Resource).
	// Optional: without it a call's Resource changes nothing.
	RateLimits RateLimits
}

// Context is what a step knows about where it runs. Calls with distinct
// names may run concurrently; a second Call of a name in one attempt fails
// with ErrDuplicateCall.
type Context struct {
	cfg ContextConfig

	mu       sync.Mutex
	journal  map[string]checkpoint.CallRecord
	used     map[string]bool
	calls    []checkpoint.CallRecord
	effects  []checkpoint.Effect
	effect   string // the name of the step's Effect, once made
	signals  map[string]bool
	spent    float64
	mismatch bool
}

// Spend adds cost to the step (model tokens, paid API calls), counted
// against the run's MaxSpend cap when the step commits. Only the attempt
// that commits is counted, so report the cost of every call it uses,
// including calls Call read back from an earlier attempt's journal (that
// attempt never committed its spend): each recorded call is then counted
// exactly once.
func (s *Context) Spend(amount float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spent += amount
}

// Spent is what this attempt reported through Spend.
func (s *Context) Spent() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spent
}

// JournalMismatch reports whether a call of this attempt hit ErrJournalMismatch,
// even if the step swallowed the error.
func (s *Context) JournalMismatch() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mismatch
}

// NewContext returns a step context. The worker builds one per delivery;
// tests of a workflow's steps build their own (see the examples).
func NewContext(cfg ContextConfig) *Context {
	s := &Context{cfg: cfg, journal: make(map[string]checkpoint.CallRecord, len(cfg.Journal)), used: map[string]bool{}}
	for _, r := range cfg.Journal {
		s.journal[r.Name] = r
	}
	return s
}

// RunID is the id of the run.
func (s *Context) RunID() string { return s.cfg.RunID }

// Workflow is the workflow's name.
func (s *Context) Workflow() string { return s.cfg.Workflow }

// Step is the step number, counting from 1 (step names may repeat in a loop;
// numbers don't).
func (s *Context) Step() int { return s.cfg.Step }

// StepName is the name of the workflow step being run.
func (s *Context) StepName() string { return s.cfg.StepName }

// Attempt is the delivery of this step, 1 on the first.
func (s *Context) Attempt() int { return s.cfg.Attempt }

// Branch is i in branch i of a fan-out, 0 in a step.
func (s *Context) Branch() int { return s.cfg.Branch }

// IdempotencyKey is the key for this step's side effect: "<run>:step<n>",
// and "<run>:step<n>.<i>" in branch i of the fan-out whose join is step n.
// It names the logical step, never the attempt, so a retry presents the
// same key.
func (s *Context) IdempotencyKey() string {
	key := s.cfg.RunID + ":step" + strconv.Itoa(s.cfg.Step)
	if s.cfg.Branch > 0 {
		key += "." + strconv.Itoa(s.cfg.Branch)
	}
	return key
}

// Key is the idempotency key of one of several effects of this step:
// "<run>:step<n>:<name>".
func (s *Context) Key(name string) string { return s.IdempotencyKey() + ":" + name }

// Heartbeat tells the queue that a long step is alive. The worker also
// heartbeats on its own while a step runs; call this from loops that must
// not be mistaken for a hung step.
func (s *Context) Heartbeat() {
	if s.cfg.Heartbeat != nil {
		s.cfg.Heartbeat()
	}
}

// RecordEffect lists a side effect the step performed with key on the
// run, and whether the provider answered that it had already seen the
// key. Effect does this for you; use it for effects keyed by hand.
func (s *Context) RecordEffect(key string, replayed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.effects = append(s.effects, checkpoint.Effect{Key: key, Replayed: replayed})
}

// latestDecision is the latest decision recorded for this step, or nil.
func (s *Context) latestDecision() *checkpoint.Approval {
	if n := len(s.cfg.Approvals); n > 0 {
		a := s.cfg.Approvals[n-1]
		return &a
	}
	return nil
}

// Approval returns the decision that applies to req: the latest decision for
// this step, provided it was taken on the payload req presents now. When
// the facts changed since (the payload hashes differently) or nobody decided
// yet, it returns nil and the step should return Park[S](req) to ask again.
// The decision's Approved, By and Reason say which way it went, who and why.
func (s *Context) Approval(req ApprovalRequest) (*checkpoint.Approval, error) {
	sum, err := PayloadSHA256(req.Payload)
	if err != nil {
		return nil, err
	}
	d := s.latestDecision()
	if d == nil || d.PayloadSHA256 != sum {
		return nil, nil
	}
	return d, nil
}

// ApprovalOf returns the latest decision taken at this step on exactly
// req's payload, or nil. Unlike Approval, a decision on another payload
// taken since does not hide it: for a step that asks several questions in
// turn (the gated calls of one model turn, each parked on by itself).
func (s *Context) ApprovalOf(req ApprovalRequest) (*checkpoint.Approval, error) {
	sum, err := PayloadSHA256(req.Payload)
	if err != nil {
		return nil, err
	}
	for i := len(s.cfg.Approvals) - 1; i >= 0; i-- {
		if a := s.cfg.Approvals[i]; a.PayloadSHA256 == sum {
			return &a, nil
		}
	}
	return nil, nil
}

// Calls returns the calls journaled by this attempt, in order.
func (s *Context) Calls() []checkpoint.CallRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]checkpoint.CallRecord(nil), s.calls...)
}

// Effects returns the effects noted by this attempt.
func (s *Context) Effects() []checkpoint.Effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]checkpoint.Effect(nil), s.effects...)
}

// PayloadSHA256 is the hex SHA-256 of payload's JSON encoding: what an
// approval names to say which payload it approved.
func PayloadSHA256(payload any) (string, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("encode approval payload: %w", err)
	}
	return SHA256Hex(b), nil
}

// SHA256Hex is the hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// ErrJournalMismatch: a call was made under a name already journaled for
// this step with different arguments. The workflow is not deterministic up
// to its calls (a bug); the step is not retried.
var ErrJournalMismatch = errors.New("journaled call replayed with different arguments")

// JournalError: the store could not record a call's result (the call was
// made). It is the store's failure, not the step's: the worker retries the
// step without counting it against the step's attempts.
type JournalError struct {
	Call, Key string
	Err       error
}

func (e *JournalError) Error() string {
	return fmt.Sprintf("journal call %s of %s: %v", e.Call, e.Key, e.Err)
}

func (e *JournalError) Unwrap() error { return e.Err }

// ErrDuplicateCall: one attempt of a step used the same call name twice.
var ErrDuplicateCall = errors.New("call name used twice in one step")

// Call runs fn once per step and journals its result: a retried step gets
// the recorded result back and fn is not called again (a model call is not
// deterministic; a tool may move money). The result is stored as soon as fn
// returns, before the step goes on. args identify the call; the same name
// with different args is ErrJournalMismatch. Errors from fn are not
// journaled: the next attempt calls again. Options say more about the
// call, such as the Resource it uses.
func Call[T any](ctx context.Context, s *Context, name string, args any, fn func(ctx context.Context) (T, error), opts ...CallOption) (T, error) {
	return CallNoted(ctx, s, name, args, fn, nil, opts...)
}

// CallNoted is Call with a note: note describes the result in one line
// for people reading the run (`durable runs show`: "model x: 812+95
// tokens, calls refund"). It is journaled with the result and shown with
// the step; it does not take part in the call's identity.
func CallNoted[T any](ctx context.Context, s *Context, name string, args any, fn func(ctx context.Context) (T, error), note func(T) string, opts ...CallOption) (T, error) {
	var zero T
	argsJSON, err := json.Marshal(args)
	if err != nil {
		return zero, fmt.Errorf("call %s: encode args: %w", name, err)
	}
	argsSum := SHA256Hex(argsJSON)

	s.mu.Lock()
	if s.used[name] {
		s.mu.Unlock()
		return zero, fmt.Errorf("call %s in %s: %w", name, s.IdempotencyKey(), ErrDuplicateCall)
	}
	s.used[name] = true
	rec, ok := s.journal[name]
	s.mu.Unlock()

	if ok {
		// Answered from the journal: marked on the step's span, not timed
		// as new work.
		trace.SpanFromContext(ctx).AddEvent("durable.call.replayed", trace.WithAttributes(attribute.String("durable.call", name)))
		return replayCall[T](s, name, argsSum, rec)
	}
	cs := settingsOf(opts)
	v, err := makeCall(ctx, s, name, cs, fn)
	if err != nil {
		s.mu.Lock()
		delete(s.used, name)
		s.mu.Unlock()
		return zero, err
	}
	result, err := json.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("call %s: encode result: %w", name, err)
	}
	rec = checkpoint.CallRecord{Name: name, ArgsSHA256: argsSum, Result: result, At: time.Now().UTC()}
	if note != nil {
		rec.Note = note(v)
	}
	return recordCall[T](ctx, s, rec)
}

// makeCall calls fn in its span, after taking a token of the call's
// resource (see Resource).
func makeCall[T any](ctx context.Context, s *Context, name string, cs callSettings, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	if err := s.takeToken(ctx, name, cs); err != nil {
		return zero, err
	}
	cctx, span := tracer.Start(s.limited(ctx, cs), "durable.call", trace.WithAttributes(attribute.String("durable.call", name)))
	v, err := fn(cctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		return zero, s.callFailed(ctx, name, cs, err)
	}
	return v, nil
}

// recordCall journals the call rec and returns its result as a retry
// will see it.
func recordCall[T any](ctx context.Context, s *Context, rec checkpoint.CallRecord) (T, error) {
	var zero T
	if s.cfg.Recorder != nil {
		// The effect happened: record it even if the step's context was
		// cancelled meanwhile (shutdown, step timeout).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		stored, err := s.cfg.Recorder.RecordCall(rctx, rec)
		cancel()
		if err != nil {
			return zero, &JournalError{Call: rec.Name, Key: s.IdempotencyKey(), Err: err}
		}
		if string(stored.Result) != string(rec.Result) || stored.ArgsSHA256 != rec.ArgsSHA256 {
			// A concurrent attempt of this step recorded first: its result
			// is the one the run continues with.
			return replayCall[T](s, rec.Name, rec.ArgsSHA256, stored)
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, rec)
	s.mu.Unlock()
	// Return the decoded record, not v: a retry gets the value back from
	// JSON, and the first run must see exactly what a retry will see.
	var out T
	if err := json.Unmarshal(rec.Result, &out); err != nil {
		return zero, fmt.Errorf("call %s: decode result: %w", rec.Name, err)
	}
	return out, nil
}

// tracer makes the spans of journaled calls: children of the worker's
// span of the step (the step's ctx carries it).
var tracer = otel.Tracer("github.com/durable-run/durable/pkg/steps")

// Replayed reports whether the call name was answered from the journal in
// this attempt (its function was not called again).
func (s *Context) Replayed(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.calls {
		if c.Name == name {
			return c.Replayed
		}
	}
	return false
}

// replayCall returns a recorded result in place of calling again.
func replayCall[T any](s *Context, name, argsSum string, rec checkpoint.CallRecord) (T, error) {
	var v T
	if rec.ArgsSHA256 != argsSum {
		s.mu.Lock()
		s.mismatch = true
		s.mu.Unlock()
		return v, fmt.Errorf("call %s of %s: recorded args %.12s, now %.12s: %w", name, s.IdempotencyKey(), rec.ArgsSHA256, argsSum, ErrJournalMismatch)
	}
	if err := json.Unmarshal(rec.Result, &v); err != nil {
		return v, fmt.Errorf("call %s of %s: decode recorded result: %w", name, s.IdempotencyKey(), err)
	}
	rec.Replayed = true
	s.mu.Lock()
	s.calls = append(s.calls, rec)
	s.mu.Unlock()
	return v, nil
}
