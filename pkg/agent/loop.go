package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
)

// Step names of an agent loop's workflow. With Config.ParallelTools the
// tool step fans the model's calls out to StepToolCall branches and
// StepToolJoin collects their results.
const (
	StepModel    = "model"
	StepTool     = "tool"
	StepToolCall = "tool-call"
	StepToolJoin = "tool-join"
)

// Defaults of Config.
const (
	DefaultInlineLimit = 1024
	DefaultTailLimit   = 2048
	DefaultViewLimit   = 64 << 10
	DefaultCacheBytes  = 64 << 20
)

// Config defines an agent loop.
type Config struct {
	// Name and Version of the workflow.
	Name    string
	Version int
	// Model answers; required. Wrap a provider adapter (model/anthropic,
	// model/openai) or a model.Script.
	Model model.Model
	// ModelName is the configured model's name: it prices a response that
	// names no model and is compared with later runs' to say the model
	// changed.
	ModelName string
	System    string
	Tools     []*Tool
	// MaxTokens caps each answer; 0 leaves it to the adapter.
	MaxTokens int
	// Budget applies to every run; a run's input may set its own
	// ({"budget": {"max_tokens": 5000}}).
	Budget Budget
	// Prices turn tokens into spend. Required for a MaxSpend budget.
	Prices Prices
	// Prompt makes the first user message of the run's input. Default:
	// the input's "message" field.
	Prompt func(input json.RawMessage) (string, error)
	// InlineLimit: tool results longer than this go to the blob store
	// (the history keeps a reference and this many bytes). Default 1 KiB.
	InlineLimit int
	// TailLimit: the recent history is sealed into a blob segment once
	// it encodes to more than this. Default 2 KiB.
	TailLimit int
	// ViewLimit is how much of one tool result the model reads. Default 64 KiB.
	ViewLimit int
	// Caps are the workflow's hard caps (steps.Caps), beside the budget.
	Caps steps.Caps
	// Retry of the model and tool steps; default steps.DefaultRetry.
	Retry steps.RetryPolicy
	// Cache of blobs read back (history segments, results); default 64 MiB.
	Cache *Cache
	// ParallelTools runs the tool calls of one model answer at once, as
	// the branches of one fan-out (steps.FanOut): call i of the answer
	// asked at step n-1 runs with the key "<run>:step<n+1>.<i>", and the
	// results go back to the model in call order. A gated call parks the
	// run first, one at a time, with the exact call and the key it will
	// run with; a rejected one is told to the model beside the others'
	// results. It changes the steps and keys of a run: give the workflow a
	// new Version, so that runs started without it finish without it.
	ParallelTools bool
}

// State is an agent run's state, committed with every step.
type State struct {
	History History `json:"history"`
	// Pending are the tool calls of the model's last answer not run yet.
	Pending []model.ToolCall `json:"pending,omitempty"`
	// Done are the results of this answer's calls run so far.
	Done   []Result `json:"done,omitempty"`
	Usage  Usage    `json:"usage"`
	Budget Budget   `json:"budget"`
	// Base is the budget the run started with: an approval to go on
	// raises the budget reached by its amount.
	Base Budget `json:"base"`
	// Granted counts budget extensions approved.
	Granted int `json:"granted,omitempty"`
	// Started is the model and tool set of the run's first model call.
	Started *Fingerprint `json:"started,omitempty"`
	// Notices say what changed under the run (model, tools), oldest first.
	Notices []string `json:"notices,omitempty"`
	Answer  string   `json:"answer,omitempty"`
}

// Fingerprint identifies the model and the tool set a call was made with.
type Fingerprint struct {
	Model string `json:"model"`
	Tools string `json:"tools_sha256"`
}

// ToolCallApproval is the payload of a run parked on a gated tool call:
// exactly the call that runs once approved.
type ToolCallApproval struct {
	Run    string          `json:"run"`
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Key    Key             `json:"key"`
	CallID string          `json:"call_id"`
}

// BudgetApproval is the payload of a run parked on its budget.
type BudgetApproval struct {
	Run     string `json:"run"`
	Budget  string `json:"budget"` // steps, tokens or spend
	Used    string `json:"used"`
	Limit   string `json:"limit"`
	RaiseTo string `json:"raise_to"`
}

// BudgetError is the reason of a run dead-lettered by its budget.
type BudgetError struct{ Budget, Used, Limit string }

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%s budget reached: used %s of %s", e.Budget, e.Used, e.Limit)
}

type loop struct {
	cfg   Config
	tools map[string]*Tool
	defs  []model.ToolDef
	fp    Fingerprint
	// The steps' Refs: the model's turn, the tools' step, and with
	// ParallelTools the branch of one call and the join.
	model, tool, toolJoin steps.Ref[State]
	toolCall              steps.BranchRef[branchCall, Result]
}

// New builds the loop's workflow. Configuration errors (no model, a tool
// named twice, a spend budget without a price) surface when the workflow
// is registered.
func New(cfg Config) *steps.Workflow[State] {
	if cfg.InlineLimit <= 0 {
		cfg.InlineLimit = DefaultInlineLimit
	}
	if cfg.TailLimit <= 0 {
		cfg.TailLimit = DefaultTailLimit
	}
	if cfg.ViewLimit <= 0 {
		cfg.ViewLimit = DefaultViewLimit
	}
	if cfg.Cache == nil {
		cfg.Cache = NewCache(DefaultCacheBytes)
	}
	l := &loop{cfg: cfg, tools: map[string]*Tool{}}
	err := l.check()
	opts := []steps.StepOption{}
	if cfg.Retry != (steps.RetryPolicy{}) {
		opts = append(opts, steps.WithRetry(cfg.Retry))
	}
	wf := steps.New[State](cfg.Name, cfg.Version).
		Invalid(err).
		WithCaps(cfg.Caps).
		Init(func(raw json.RawMessage) (State, error) {
			if err != nil {
				return State{}, err
			}
			return l.init(raw)
		})
	l.model, l.tool = wf.Ref(StepModel), wf.Ref(StepTool)
	wf.Step(StepModel, l.think, opts...)
	if !cfg.ParallelTools {
		wf.Step(StepTool, l.act, opts...)
		return wf
	}
	l.toolJoin = wf.Ref(StepToolJoin)
	wf.Step(StepTool, l.fanOut, opts...)
	l.toolCall = steps.AddBranch(wf, StepToolCall, l.callOne, opts...)
	wf.Step(StepToolJoin, l.join, opts...)
	return wf
}

func (l *loop) check() error {
	if l.cfg.Model == nil {
		return fmt.Errorf("agent %s: no model", l.cfg.Name)
	}
	for _, t := range l.cfg.Tools {
		if !steps.ValidName(t.Name()) {
			return fmt.Errorf("agent %s: tool name %q: use 1-64 letters, digits, '-' or '_'", l.cfg.Name, t.Name())
		}
		if _, dup := l.tools[t.Name()]; dup {
			return fmt.Errorf("agent %s: tool %s given twice", l.cfg.Name, t.Name())
		}
		l.tools[t.Name()] = t
		l.defs = append(l.defs, t.Def())
	}
	sum, err := model.ToolsHash(l.defs)
	if err != nil {
		return fmt.Errorf("agent %s: %w", l.cfg.Name, err)
	}
	l.fp = Fingerprint{Model: l.cfg.ModelName, Tools: sum}
	return l.checkBudget(l.cfg.Budget)
}

func (l *loop) checkBudget(b Budget) error {
	if err := b.check(); err != nil {
		return fmt.Errorf("agent %s: %w", l.cfg.Name, err)
	}
	if b.MaxSpend > 0 {
		if _, ok := l.cfg.Prices.Cost(l.cfg.ModelName, model.Usage{}); !ok {
			return fmt.Errorf("agent %s: a spend budget needs a price for model %q (Prices, DURABLE_MODEL_PRICES)", l.cfg.Name, l.cfg.ModelName)
		}
	}
	return nil
}

// input is what the loop reads of a run's input itself.
type input struct {
	Message string  `json:"message"`
	Budget  *Budget `json:"budget"`
}

func (l *loop) init(raw json.RawMessage) (State, error) {
	var in input
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &in); err != nil {
			return State{}, fmt.Errorf("agent input: %w", err)
		}
	}
	text := in.Message
	if l.cfg.Prompt != nil {
		var err error
		if text, err = l.cfg.Prompt(raw); err != nil {
			return State{}, err
		}
	}
	if strings.TrimSpace(text) == "" {
		return State{}, errors.New(`agent input: no message (input {"message": "..."})`)
	}
	b := l.cfg.Budget
	if in.Budget != nil {
		if in.Budget.MaxSteps != 0 {
			b.MaxSteps = in.Budget.MaxSteps
		}
		if in.Budget.MaxTokens != 0 {
			b.MaxTokens = in.Budget.MaxTokens
		}
		if in.Budget.MaxSpend != 0 {
			b.MaxSpend = in.Budget.MaxSpend
		}
		if in.Budget.OnReach != "" {
			b.OnReach = in.Budget.OnReach
		}
		if in.Budget.Group != "" {
			b.Group = in.Budget.Group
		}
	}
	if err := l.checkBudget(b); err != nil {
		return State{}, err
	}
	st := State{Budget: b, Base: b}
	st.History.Append(Entry{Role: model.RoleUser, Text: text})
	return st, nil
}

// gate stops a step at a used-up budget: it parks for a decision or
// dead-letters by the budget's policy. ok means go on.
func (l *loop) gate(s *steps.Context, st *State, tokens bool) (steps.Outcome[State], bool, error) {
	return l.gateWith(s.Approval, s, st, tokens)
}

// gateWith is gate with decided, the lookup of a decision on a request:
// the tool step of ParallelTools asks several questions (the budget, each
// gated call), each found by its own payload.
func (l *loop) gateWith(decided func(steps.ApprovalRequest) (*checkpoint.Approval, error), s *steps.Context, st *State, tokens bool) (steps.Outcome[State], bool, error) {
	for {
		u := st.Usage
		if !tokens { // a tool step spends no tokens: only its steps count
			u = Usage{}
		}
		what, used, limit := st.Budget.reached(u, s.Step())
		if what == "" {
			return steps.Outcome[State]{}, true, nil
		}
		if st.Budget.OnReach != Park {
			return steps.Outcome[State]{}, false, steps.Permanent(&BudgetError{Budget: what, Used: used, Limit: limit})
		}
		raised := st.Budget
		raised.raise(what, st.Base)
		req := steps.ApprovalRequest{
			Payload: BudgetApproval{Run: s.RunID(), Budget: what, Used: used, Limit: limit, RaiseTo: limitOf(raised, what)},
			Group:   cmp.Or(st.Budget.Group, "supervisors"),
		}
		d, err := decided(req)
		if err != nil {
			return steps.Outcome[State]{}, false, err
		}
		if d == nil {
			return steps.Park[State](req), false, nil
		}
		if !d.Approved() {
			return steps.Fail(*st, fmt.Sprintf("%s budget reached (used %s of %s); continuing rejected by %s: %s", what, used, limit, d.By, d.Reason)), false, nil
		}
		st.Budget = raised
		st.Granted++
	}
}

// think is the model step: ask the model with the conversation so far.
func (l *loop) think(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	if o, ok, err := l.gate(s, &st, true); !ok {
		return o, err
	}
	msgs, err := st.History.Messages(ctx, s, l.cfg.Cache, l.cfg.ViewLimit)
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	req := model.Request{System: l.cfg.System, Messages: msgs, Tools: l.defs, MaxTokens: l.cfg.MaxTokens}
	res, err := model.Call(ctx, s, "model", l.cfg.Model, req)
	if err != nil {
		return steps.Outcome[State]{}, err
	}
	// The call counts here, whether this attempt made it or read an
	// earlier attempt's recording: the step commits once.
	name := cmp.Or(res.Model, l.cfg.ModelName)
	cost, priced := l.cfg.Prices.Cost(name, res.Usage)
	if !priced && st.Budget.MaxSpend > 0 {
		return steps.Outcome[State]{}, steps.Permanent(fmt.Errorf("no price for model %q, and the run has a spend budget (Prices, DURABLE_MODEL_PRICES)", name))
	}
	st.Usage.ModelCalls++
	st.Usage.InputTokens += res.Usage.InputTokens
	st.Usage.OutputTokens += res.Usage.OutputTokens
	st.Usage.Spend += cost
	s.Spend(cost)
	l.notice(s, &st, res)

	st.History.Append(Entry{Role: model.RoleAssistant, Text: res.Text, ToolCalls: res.ToolCalls})
	if err := st.History.seal(ctx, s, l.cfg.TailLimit); err != nil {
		return steps.Outcome[State]{}, err
	}
	if len(res.ToolCalls) > 0 {
		st.Pending, st.Done = res.ToolCalls, nil
		return steps.Next(l.tool, st), nil
	}
	st.Answer = res.Text
	return steps.Complete(st), nil
}

// notice records, once each, that the model or the tools changed since
// the run's first call, or since a replayed call was made.
func (l *loop) notice(s *steps.Context, st *State, res model.Result) {
	var say []string
	if st.Started == nil {
		fp := l.fp
		st.Started = &fp
	} else {
		if st.Started.Model != l.fp.Model {
			say = append(say, fmt.Sprintf("the model changed since the run started: %s, now %s", st.Started.Model, l.fp.Model))
		}
		if st.Started.Tools != l.fp.Tools {
			say = append(say, fmt.Sprintf("the tools changed since the run started: schema %.12s, now %.12s", st.Started.Tools, l.fp.Tools))
		}
	}
	for _, what := range res.Changed {
		say = append(say, fmt.Sprintf("step %d replayed a recorded model call made with other %s than now", s.Step(), what))
	}
	for _, n := range say {
		if !seen(st.Notices, n) && len(st.Notices) < 10 {
			st.Notices = append(st.Notices, n)
		}
	}
}

func seen(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// record is a tool call as the journal keeps it.
type record struct {
	Result
	// Replayed: the backend said it had seen the key.
	Replayed bool `json:"replayed,omitempty"`
}

// act is a tool step: run the first pending call.
func (l *loop) act(ctx context.Context, s *steps.Context, st State) (steps.Outcome[State], error) {
	if o, ok, err := l.gate(s, &st, false); !ok {
		return o, err
	}
	if len(st.Pending) == 0 {
		return steps.Next(l.model, st), nil
	}
	call := st.Pending[0]
	key := Key(s.IdempotencyKey())
	res := Result{CallID: call.ID, Tool: call.Name}
	tool := l.tools[call.Name]
	switch {
	case tool == nil:
		res.Content, res.IsError = fmt.Sprintf("%v: %q (the tools are %s)", errNoSuchTool, call.Name, strings.Join(l.toolNames(), ", ")), true
	default:
		wait, rejected, err := approve(s, tool, call, key)
		if err != nil {
			return steps.Outcome[State]{}, err
		}
		if wait != nil {
			return steps.Park[State](*wait), nil
		}
		if rejected != "" {
			res.Content, res.IsError = rejected, true
			break
		}
		rec, err := steps.CallNoted(ctx, s, "tool:"+call.Name, call.Args, func(ctx context.Context) (record, error) {
			return l.run(ctx, s, tool, call, key)
		}, func(r record) string { return describe(call.Name, key, r) })
		if err != nil {
			return steps.Outcome[State]{}, fmt.Errorf("tool %s (%s): %w", call.Name, key, err)
		}
		if tool.effect {
			s.RecordEffect(string(key), rec.Replayed || s.Replayed("tool:"+call.Name))
		}
		res = rec.Result
	}
	st.Usage.ToolCalls++
	st.Done = append(st.Done, res)
	st.Pending = st.Pending[1:]
	if len(st.Pending) > 0 {
		return steps.Next(l.tool, st), nil
	}
	st.History.Append(Entry{Role: model.RoleUser, Results: st.Done})
	st.Done = nil
	if err := st.History.seal(ctx, s, l.cfg.TailLimit); err != nil {
		return steps.Outcome[State]{}, err
	}
	return steps.Next(l.model, st), nil
}

// approve applies the tool's approval gate to call: the request to park
// on, the text of a rejection to tell the model, or neither (go on).
func approve(s *steps.Context, tool *Tool, call model.ToolCall, key Key) (*steps.ApprovalRequest, string, error) {
	return approveWith(s.Approval, s, tool, call, key)
}

// approveWith is approve with decided, the lookup of a decision on a
// request.
func approveWith(decided func(steps.ApprovalRequest) (*checkpoint.Approval, error), s *steps.Context, tool *Tool, call model.ToolCall, key Key) (*steps.ApprovalRequest, string, error) {
	a := tool.approval
	if a == nil {
		return nil, "", nil
	}
	if a.When != nil {
		need, err := a.When(call.Args)
		if err != nil {
			return nil, "", steps.Permanent(fmt.Errorf("approval rule of %s: %w", call.Name, err))
		}
		if !need {
			return nil, "", nil
		}
	}
	req := steps.ApprovalRequest{
		Payload: ToolCallApproval{Run: s.RunID(), Tool: call.Name, Args: call.Args, Key: key, CallID: call.ID},
		Group:   a.Group, TTL: a.TTL, OnExpiry: a.OnExpiry, EscalateTo: a.EscalateTo, Reminders: a.Reminders,
	}
	d, err := decided(req)
	if err != nil {
		return nil, "", err
	}
	if d == nil {
		return &req, "", nil
	}
	if !d.Approved() {
		return nil, fmt.Sprintf("not run: %s rejected this call (%s)", d.By, cmp.Or(d.Reason, "no reason given")), nil
	}
	return nil, "", nil
}

// run calls the tool and stores a large result in the blob store, inside
// the journaled call: what is recorded is small.
func (l *loop) run(ctx context.Context, s *steps.Context, tool *Tool, call model.ToolCall, key Key) (record, error) {
	out, err := tool.run(ctx, key, call.Args)
	if refused, ok := errors.AsType[*RefusedError](err); ok {
		msg := refused.Error()
		return record{Result: Result{CallID: call.ID, Tool: call.Name, Content: cut(msg, l.cfg.InlineLimit), Bytes: len(msg), IsError: true}}, nil
	}
	if err != nil {
		return record{}, err
	}
	r := record{Result: Result{CallID: call.ID, Tool: call.Name, Content: out.Content, Bytes: len(out.Content)}, Replayed: out.Replayed}
	if len(out.Content) > l.cfg.InlineLimit {
		ref, err := s.PutBlob(ctx, "result-"+call.Name, []byte(out.Content))
		if err != nil {
			return record{}, err
		}
		r.Ref = &ref
		r.Content = cut(out.Content, l.cfg.InlineLimit)
	}
	return r, nil
}

func describe(tool string, key Key, r record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s key %s: %d bytes", tool, key, r.Bytes)
	if r.Ref != nil {
		b.WriteString(" (in blob)")
	}
	if r.IsError {
		b.WriteString(", failed: " + cut(r.Content, 80))
	}
	if r.Replayed {
		b.WriteString(", provider replayed the key")
	}
	return b.String()
}

func (l *loop) toolNames() []string {
	names := make([]string, 0, len(l.tools))
	for n := range l.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
