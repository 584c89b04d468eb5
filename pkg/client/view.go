package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// RunView is a run with its history, as `durable runs show --json` prints it.
// The fields named in DESIGN.md's operator contract (run_id, workflow,
// status, step, checkpoints, approvals, effects) keep their names; others
// are added beside them.
type RunView struct {
	RunID     string            `json:"run_id"`
	Workflow  string            `json:"workflow"`
	Version   int               `json:"version"`
	Status    checkpoint.Status `json:"status"`
	Step      int               `json:"step"`
	StepName  string            `json:"step_name"`
	Input     json.RawMessage   `json:"input,omitempty"`
	StartedBy string            `json:"started_by,omitempty"`
	// TraceID is the run's trace (32 hex digits) when it was started with
	// tracing on: every span of the run is in it.
	TraceID     string           `json:"trace_id,omitempty"`
	CreatedAt   time.Time        `json:"created_at"`
	UpdatedAt   time.Time        `json:"updated_at"`
	Error       string           `json:"error,omitempty"`
	Resumes     int              `json:"resumes"`
	Redrives    int              `json:"redrives,omitempty"`
	Wait        *checkpoint.Wait `json:"wait,omitempty"`
	Checkpoints []CheckpointView `json:"checkpoints"`
	// Parent is the run and step that started this run, for a child run.
	Parent *checkpoint.ParentRef `json:"parent,omitempty"`
	// Signals delivered to the run: those consumed (the newest
	// checkpoint.MaxConsumedSignals, without their data) by time, then
	// those pending, oldest first.
	Signals []checkpoint.Signal `json:"signals,omitempty"`
	// Children lists the child runs the run's steps started, in order.
	Children []ChildView `json:"children,omitempty"`
	// Branches lists the branches of the run's fan-outs, committed or not,
	// by join step and branch.
	Branches  []BranchView            `json:"branches,omitempty"`
	Approvals []checkpoint.Approval   `json:"approvals"`
	Effects   []EffectView            `json:"effects"`
	Audit     []checkpoint.AuditEntry `json:"audit"`
	// Timeline merges the checkpoints and the audit entries (parks,
	// decisions, expiries...) in time order.
	Timeline []TimelineEntry `json:"timeline"`
	// Failures of the step at the cursor that has not committed yet (a
	// running or dead run), oldest first.
	PendingFailures []checkpoint.Failure `json:"pending_failures,omitempty"`
	State           json.RawMessage      `json:"state,omitempty"`
	// Archived is set when the run was purged from the store and this
	// view was read from its archive (see Client.Archive).
	Archived *Archived `json:"archived,omitempty"`
}

// CheckpointView summarises one checkpoint.
type CheckpointView struct {
	Step int    `json:"step"`
	Name string `json:"name"`
	// Bytes is the length of the checkpoint document as the store holds it
	// (both stores keep json.Marshal of the checkpoint).
	Bytes   int       `json:"bytes"`
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	// Resumed: the committing attempt was not the first delivery of the
	// step's message. Earlier deliveries crashed, timed out, or failed (the
	// failures the store recorded are in Failures).
	Resumed bool   `json:"resumed"`
	Gen     int    `json:"gen,omitempty"`
	Next    string `json:"next,omitempty"`
	// FanOut is the number of branches the step fanned out to.
	FanOut     int               `json:"fan_out,omitempty"`
	Status     checkpoint.Status `json:"status"`
	DurationMS float64           `json:"duration_ms"`
	// Resource and SlotWaitMS: the step queued SlotWaitMS for a slot of
	// Resource's concurrency limit before it ran (unset: it did not).
	Resource   string  `json:"resource,omitempty"`
	SlotWaitMS float64 `json:"slot_wait_ms,omitempty"`
	// TokenResource and TokenWaitMS: the step's calls waited TokenWaitMS
	// in all for tokens of TokenResource's rate limit, asleep in the step
	// and handed back to the queue before it (unset: they did not; see
	// checkpoint.Checkpoint).
	TokenResource string               `json:"token_resource,omitempty"`
	TokenWaitMS   float64              `json:"token_wait_ms,omitempty"`
	Calls         int                  `json:"calls"`
	Replayed      int                  `json:"replayed_calls"`
	Journal       []CallView           `json:"journal,omitempty"`
	Effects       []EffectView         `json:"effects,omitempty"`
	Failures      []checkpoint.Failure `json:"failures,omitempty"`
}

// BranchView is one branch of a fan-out: branch Branch of the fan-out
// joined at step Step, and its checkpoint once committed.
type BranchView struct {
	Step       int        `json:"step"`
	Branch     int        `json:"branch"`
	Name       string     `json:"name"`
	Committed  bool       `json:"committed"`
	Bytes      int        `json:"bytes,omitempty"`
	At         *time.Time `json:"at,omitempty"`
	Attempt    int        `json:"attempt,omitempty"`
	DurationMS float64    `json:"duration_ms,omitempty"`
	// Resource, SlotWaitMS, TokenResource and TokenWaitMS: what the
	// branch waited for a slot and for tokens, as a CheckpointView's.
	Resource      string       `json:"resource,omitempty"`
	SlotWaitMS    float64      `json:"slot_wait_ms,omitempty"`
	TokenResource string       `json:"token_resource,omitempty"`
	TokenWaitMS   float64      `json:"token_wait_ms,omitempty"`
	Calls         int          `json:"calls,omitempty"`
	Effects       []EffectView `json:"effects,omitempty"`
}

// ChildView is a child run a step started, and how it stands.
type ChildView struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Step     int    `json:"step"`
	// Status is "" for a child not started (Error says so).
	Status checkpoint.Status `json:"status"`
	Error  string            `json:"error,omitempty"`
}

// CallView is one journaled call of a step, without its result.
type CallView struct {
	Name       string `json:"name"`
	ArgsSHA256 string `json:"args_sha256"`
	Replayed   bool   `json:"replayed"`
	Error      string `json:"error,omitempty"`
	// Note describes the call (model and tokens, tool and key); see
	// steps.CallNoted.
	Note string `json:"note,omitempty"`
}

// EffectView is an effect with the step that performed it.
type EffectView struct {
	Key      string `json:"key"`
	Replayed bool   `json:"replayed"`
	Step     int    `json:"step"`
	// Branch is set for the effect of a fan-out's branch (Step is then its
	// join step).
	Branch int `json:"branch,omitempty"`
}

// TimelineEntry is one event of a run: a committed step (Kind "step",
// Checkpoint set) or an audit entry (Kind the audit kind: parked,
// decision, expired..., Audit set).
type TimelineEntry struct {
	At         time.Time              `json:"at"`
	Kind       string                 `json:"kind"`
	Step       int                    `json:"step"`
	Checkpoint *CheckpointView        `json:"checkpoint,omitempty"`
	Audit      *checkpoint.AuditEntry `json:"audit,omitempty"`
}

// TimelineStep is the Kind of a timeline entry for a committed step.
const TimelineStep = "step"

// RunSummary is one line of `durable runs list --json`.
type RunSummary struct {
	RunID     string            `json:"run_id"`
	Workflow  string            `json:"workflow"`
	Status    checkpoint.Status `json:"status"`
	Step      int               `json:"step"`
	StepName  string            `json:"step_name"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	Error     string            `json:"error,omitempty"`
	Resumes   int               `json:"resumes,omitempty"`
	// WaitDeadline is the parked run's deadline (its TTL or timer).
	WaitDeadline *time.Time `json:"wait_deadline,omitempty"`
	// PastTTL and Stuck are set by List (see IsPastTTL and IsStuck).
	PastTTL bool `json:"past_ttl,omitempty"`
	Stuck   bool `json:"stuck,omitempty"`
}

// Summarize turns runs into list lines.
func Summarize(runs []checkpoint.Run) []RunSummary {
	out := make([]RunSummary, 0, len(runs))
	for _, r := range runs {
		s := RunSummary{RunID: r.ID, Workflow: r.Workflow, Status: r.Status, Step: r.Step, StepName: r.StepName, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, Error: r.Error, Resumes: r.Resumes}
		if r.Wait != nil && !r.Wait.Deadline.IsZero() {
			d := r.Wait.Deadline
			s.WaitDeadline = &d
		}
		out = append(out, s)
	}
	return out
}

// CheckpointBytes is the length of cp's document as the stores keep it.
func CheckpointBytes(cp checkpoint.Checkpoint) int {
	b, err := json.Marshal(cp)
	if err != nil {
		return cp.Size()
	}
	return len(b)
}

// Inspect reads a run with its checkpoints, approvals, effects and audit,
// and the recorded failures of every step that took more than one
// delivery (one extra read per such step).
func (c *Client) Inspect(ctx context.Context, id string) (RunView, error) {
	run, err := c.store.GetRun(ctx, id)
	if errors.Is(err, checkpoint.ErrNotFound) {
		// Purged, or never stored: its archive, when there is one, else
		// the error (a *checkpoint.PurgedError says what the run was, and
		// when it ended).
		var purged *checkpoint.PurgedError
		if errors.As(err, &purged) {
			return c.fromArchive(ctx, id, purged)
		}
		return c.fromArchive(ctx, id, fmt.Errorf("run %s: %w", id, err))
	}
	if err != nil {
		return RunView{}, fmt.Errorf("run %s: %w", id, err)
	}
	// The record keeps only the newest of its audit trail and decisions,
	// and large payloads by hash: the view shows them all.
	if h, ok := c.store.(checkpoint.History); ok {
		if run, err = checkpoint.Restore(ctx, h, run); err != nil {
			return RunView{}, fmt.Errorf("run %s: %w", id, err)
		}
	}
	cps, err := c.store.Checkpoints(ctx, id)
	if err != nil {
		return RunView{}, fmt.Errorf("checkpoints of %s: %w", id, err)
	}
	v := RunView{
		RunID: run.ID, Workflow: run.Workflow, Version: run.Version, Status: run.Status,
		Step: run.Step, StepName: run.StepName, Input: run.Input, StartedBy: run.StartedBy, TraceID: TraceID(run),
		CreatedAt: run.CreatedAt, UpdatedAt: run.UpdatedAt, Error: run.Error, Resumes: run.Resumes,
		Redrives: run.Redrives, Wait: run.Wait, Checkpoints: []CheckpointView{}, Approvals: run.Approvals,
		Effects: []EffectView{}, Audit: run.Audit, Timeline: []TimelineEntry{}, Parent: run.Parent, Signals: signalsOf(run),
	}
	if v.Approvals == nil {
		v.Approvals = []checkpoint.Approval{}
	}
	if v.Audit == nil {
		v.Audit = []checkpoint.AuditEntry{}
	}
	committed := map[int]bool{}
	for _, cp := range cps {
		committed[cp.Step] = true
		cv, err := c.viewCheckpoint(ctx, &v, run, cp)
		if err != nil {
			return RunView{}, err
		}
		v.Checkpoints = append(v.Checkpoints, cv)
		v.State = cp.State
	}
	if v.PendingFailures, err = c.pendingFailures(ctx, run, committed[run.Step]); err != nil {
		return RunView{}, err
	}
	for i := range v.Checkpoints {
		cv := &v.Checkpoints[i]
		v.Timeline = append(v.Timeline, TimelineEntry{At: cv.At, Kind: TimelineStep, Step: cv.Step, Checkpoint: cv})
	}
	for i := range v.Audit {
		a := &v.Audit[i]
		v.Timeline = append(v.Timeline, TimelineEntry{At: a.At, Kind: a.Kind, Step: a.Step, Audit: a})
	}
	sort.SliceStable(v.Timeline, func(i, j int) bool { return v.Timeline[i].At.Before(v.Timeline[j].At) })
	return v, nil
}

// viewCheckpoint is the view of checkpoint cp of run; it adds cp's
// effects, children and branches to v.
func (c *Client) viewCheckpoint(ctx context.Context, v *RunView, run checkpoint.Run, cp checkpoint.Checkpoint) (CheckpointView, error) {
	cv := CheckpointView{Step: cp.Step, Name: cp.Name, Bytes: CheckpointBytes(cp), At: cp.At, Attempt: cp.Attempt,
		Resumed: cp.Attempt > 1, Gen: cp.Gen, Next: cp.Next, Status: cp.Status, DurationMS: cp.DurationMS, Calls: len(cp.Journal),
		Resource: cp.Resource, SlotWaitMS: cp.SlotWaitMS, TokenResource: cp.TokenResource, TokenWaitMS: cp.TokenWaitMS}
	for _, call := range cp.Journal {
		if call.Replayed {
			cv.Replayed++
		}
		cv.Journal = append(cv.Journal, CallView{Name: call.Name, ArgsSHA256: call.ArgsSHA256, Replayed: call.Replayed, Error: call.Error, Note: call.Note})
	}
	for _, e := range cp.Effects {
		ev := EffectView{Key: e.Key, Replayed: e.Replayed, Step: cp.Step}
		cv.Effects = append(cv.Effects, ev)
		v.Effects = append(v.Effects, ev)
	}
	if cp.Attempt > 1 {
		snap, err := c.store.Load(ctx, run.ID, checkpoint.AtStep(cp.Step))
		if err != nil {
			return cv, fmt.Errorf("failures of %s:%d: %w", run.ID, cp.Step, err)
		}
		cv.Failures = snap.Failures
	}
	if len(cp.Children) > 0 {
		children, err := c.ChildResults(ctx, run, cp.Step)
		if err != nil {
			return cv, err
		}
		for _, ch := range children {
			v.Children = append(v.Children, ChildView{RunID: ch.ID, Workflow: ch.Workflow, Step: cp.Step, Status: ch.Status, Error: ch.Error})
		}
	}
	if cp.FanOut != nil {
		cv.FanOut = len(cp.FanOut.Branches)
		if err := c.viewBranches(ctx, v, cp); err != nil {
			return cv, err
		}
	}
	return cv, nil
}

// pendingFailures are the recorded failures of the step run is at when
// it is not committed (committed says whether it is): of the failed
// branch of a dead fan-out, or of the running or dead step.
func (c *Client) pendingFailures(ctx context.Context, run checkpoint.Run, committed bool) ([]checkpoint.Failure, error) {
	if run.Status == checkpoint.StatusDead && run.FailedBranch > 0 {
		snap, err := c.store.Load(ctx, run.ID, checkpoint.AtBranch(run.Step, run.FailedBranch))
		if err != nil {
			return nil, fmt.Errorf("failures of %s:%d.%d: %w", run.ID, run.Step, run.FailedBranch, err)
		}
		return snap.Failures, nil
	}
	if (run.Status == checkpoint.StatusRunning || run.Status == checkpoint.StatusDead) && !committed && run.Step > 0 {
		snap, err := c.store.Load(ctx, run.ID, checkpoint.AtStep(run.Step))
		if err != nil {
			return nil, fmt.Errorf("failures of %s:%d: %w", run.ID, run.Step, err)
		}
		return snap.Failures, nil
	}
	return nil, nil
}

// viewBranches adds the branches of the fan-out committed at fan to v,
// and their effects to v.Effects.
func (c *Client) viewBranches(ctx context.Context, v *RunView, fan checkpoint.Checkpoint) error {
	join := fan.Step + 1
	done, err := c.store.BranchCheckpoints(ctx, v.RunID, join, len(fan.FanOut.Branches))
	if err != nil {
		return fmt.Errorf("branches of %s:%d: %w", v.RunID, join, err)
	}
	byBranch := make(map[int]checkpoint.Checkpoint, len(done))
	for _, cp := range done {
		byBranch[cp.Branch] = cp
	}
	for k, b := range fan.FanOut.Branches {
		bv := BranchView{Step: join, Branch: k + 1, Name: b.Step}
		if cp, ok := byBranch[k+1]; ok {
			at := cp.At
			bv.Committed, bv.Bytes, bv.At, bv.Attempt, bv.DurationMS, bv.Calls = true, CheckpointBytes(cp), &at, cp.Attempt, cp.DurationMS, len(cp.Journal)
			bv.Resource, bv.SlotWaitMS, bv.TokenResource, bv.TokenWaitMS = cp.Resource, cp.SlotWaitMS, cp.TokenResource, cp.TokenWaitMS
			for _, e := range cp.Effects {
				ev := EffectView{Key: e.Key, Replayed: e.Replayed, Step: join, Branch: k + 1}
				bv.Effects = append(bv.Effects, ev)
				v.Effects = append(v.Effects, ev)
			}
		}
		v.Branches = append(v.Branches, bv)
	}
	return nil
}

// signalsOf lists run's signals for a view: consumed (what the record
// keeps of them: no data) and pending, by the time each came.
func signalsOf(run checkpoint.Run) []checkpoint.Signal {
	if len(run.Consumed) == 0 {
		return run.Signals
	}
	out := make([]checkpoint.Signal, 0, len(run.Consumed)+len(run.Signals))
	for _, c := range run.Consumed {
		out = append(out, c.Signal())
	}
	out = append(out, run.Signals...)
	slices.SortStableFunc(out, func(a, b checkpoint.Signal) int { return a.At.Compare(b.At) })
	return out
}
