package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ValidID reports whether s can be a run id or a workflow name: 1-128
// letters, digits, '-' or '_'. Ids become NATS subject tokens, KV keys and
// Redis Cluster hash tags, so '.', '*', '>', spaces and braces are out.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Status is the lifecycle state of a run.
type Status string

const (
	StatusRunning   Status = "running"
	StatusWaiting   Status = "waiting"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
	StatusDead      Status = "dead"
)

// Terminal reports whether a run in this status will never run another step
// on its own (redrive of a dead run is an operator action).
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusDead:
		return true
	}
	return false
}

// Valid reports whether s is one of the statuses above.
func (s Status) Valid() bool {
	switch s {
	case StatusRunning, StatusWaiting, StatusCompleted, StatusFailed, StatusCancelled, StatusDead:
		return true
	}
	return false
}

var (
	// ErrNotFound: no run (or checkpoint) with that id.
	ErrNotFound = errors.New("not found")
	// ErrRunExists: CreateRun found a run with the same id; the existing run is returned.
	ErrRunExists = errors.New("run already exists")
	// ErrCheckpointExists: another writer committed this step first. The caller
	// discards its own result and continues with the winner's.
	ErrCheckpointExists = errors.New("checkpoint already committed")
	// ErrConflict: the run record changed since it was read (its revision moved).
	ErrConflict = errors.New("run changed concurrently")
)

// Run is the record of one workflow run. The store owns Rev.
type Run struct {
	ID       string `json:"run_id"`
	Workflow string `json:"workflow"`
	// Version of the workflow the run is pinned to.
	Version int    `json:"version"`
	Status  Status `json:"status"`
	// Step is the cursor: the number of the step to run next while running or
	// waiting, the last step run once terminal. Steps count from 1.
	Step int `json:"step"`
	// StepName is the workflow step at the cursor.
	StepName  string          `json:"step_name"`
	Input     json.RawMessage `json:"input,omitempty"`
	StartedBy string          `json:"started_by,omitempty"`
	// Trace is the W3C traceparent of the span that started the run, the
	// root of its trace, when tracing was on: what resumes the run later
	// (a decision, a signal, an expiry, a redrive) continues that trace.
	Trace     string    `json:"trace,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Wait is set while the run is parked for approval.
	Wait *Wait `json:"wait,omitempty"`
	// Approvals holds the decisions taken on the run, oldest first: those
	// on the step at the cursor and the newest others (see Run.Spill);
	// the ApprovalsArchived before them are in the store's approval log
	// (History).
	Approvals         []Approval `json:"approvals,omitempty"`
	ApprovalsArchived int        `json:"approvals_archived,omitempty"`
	// Error says why a run failed or went dead.
	Error string `json:"error,omitempty"`
	// FailedBranch is the branch of the fan-out at the cursor that sent
	// the run to the dead letters, 0 when a step did.
	FailedBranch int `json:"failed_branch,omitempty"`
	// Parent is set on a child run: the run and step that started it.
	Parent *ParentRef `json:"parent,omitempty"`
	// Signals holds the signals delivered to the run that no step
	// consumed yet, oldest first, and the expiries of waits for one that
	// no step read yet. A step's commit moves what it read off the
	// record (ConsumeSignals).
	Signals []Signal `json:"signals,omitempty"`
	// Consumed remembers the newest MaxConsumedSignals signals that steps
	// consumed, without their data: a retry of one is a duplicate.
	Consumed []ConsumedSignal `json:"consumed_signals,omitempty"`
	// Resumes counts the times the run was resumed after parking.
	Resumes int `json:"resumes,omitempty"`
	// Audit records the events of the run's waits: parks, decisions,
	// expiries, escalations, reminders and refused approvals, oldest
	// first: the newest AuditKept on the record, the AuditArchived before
	// them in the store's audit log (History). Entry i here has sequence
	// AuditArchived+i.
	Audit         []AuditEntry `json:"audit,omitempty"`
	AuditArchived int          `json:"audit_archived,omitempty"`
	// Refusals counts the refused approvals audited on the run, wherever
	// their entries are now (a record from before it counted has them on
	// its audit).
	Refusals int `json:"refusals,omitempty"`
	// Redrives counts the times an operator put the dead run back to work.
	Redrives int `json:"redrives,omitempty"`
	// RedriveStep is the step at which the run was last redriven: the
	// redrive published it, so a commit of the step before owes it no
	// message of its own (transition.Follow). 0 when never redriven, or
	// redriven by a version that did not record it.
	RedriveStep int `json:"redrive_step,omitempty"`
	// Spend sums what the run's committed steps reported (the max-spend cap).
	Spend float64 `json:"spend,omitempty"`
	// Steps counts the steps the run has committed (the max-steps cap).
	Steps int `json:"steps_taken,omitempty"`

	// Rev is the store's revision of this record, used for compare-and-set.
	// It is not part of the JSON document.
	Rev uint64 `json:"-"`
}

// ParentRef names the run, and its step, that started a child run.
type ParentRef struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
}

// Wait kinds.
const (
	WaitApproval = "approval" // a person or system must decide (the default)
	WaitTimer    = "timer"    // a durable timer: the scheduler wakes the run
	WaitChildren = "children" // child runs: the last to end resumes the run
	WaitSignal   = "signal"   // a named signal (Wait.Name), with a deadline
)

// Liveness is implemented by a store that keeps, apart from the run
// record, when a worker last showed that a run's step (or a branch of its
// fan-out) is at work: the scheduler's stuck-run repair counts it as
// progress, so a step that runs long is not published again beside
// itself. A mark is one small write, never a change of the run record.
// Both stores of this module implement it; the marks of a run whose
// step ended are not removed (Redis expires them after a day; on KV they
// are one small key per run that ran a long step).
type Liveness interface {
	// MarkAlive records that run id's step was at work at at.
	MarkAlive(ctx context.Context, id string, at time.Time) error
	// LastAlive returns the newest mark of run id, zero when none.
	LastAlive(ctx context.Context, id string) (time.Time, error)
}

// Signal is a named event delivered to a run (`durable signal`, the
// approver's API, a signed event), or the expiry of a wait for one.
type Signal struct {
	Name string `json:"name"`
	// ID identifies the signal for retries: a second signal of the same
	// id is the same signal.
	ID      string          `json:"id"`
	Data    json.RawMessage `json:"data,omitempty"`
	By      string          `json:"by,omitempty"`
	Channel string          `json:"channel,omitempty"`
	At      time.Time       `json:"at"`
	// Expired marks the expiry of a wait for Name: no signal came in time.
	Expired bool `json:"expired,omitempty"`
	// ConsumedBy is the step that consumed it (under the run's generation
	// ConsumedGen), 0 while it is pending. On a run record it is set only
	// by versions before consumed signals left the record (Run.Consumed);
	// ConsumeSignals moves such signals when the run is next written.
	// Views of a run (client.RunView) set it on the consumed ones.
	ConsumedBy  int `json:"consumed_by,omitempty"`
	ConsumedGen int `json:"consumed_gen,omitempty"`
}

// ConsumedSignal is what a run keeps of a signal a step consumed: enough
// to answer a retry of it (same id) as a duplicate, or to refuse the id
// with other data, and to say which step took it.
type ConsumedSignal struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	By      string    `json:"by,omitempty"`
	Channel string    `json:"channel,omitempty"`
	At      time.Time `json:"at"`
	// Step is the step whose commit consumed it.
	Step int `json:"step"`
	// DataSHA256 is the hex SHA-256 of the signal's data.
	DataSHA256 string `json:"data_sha256,omitempty"`
}

// Signal is c as a Signal consumed by step c.Step, without its data.
func (c ConsumedSignal) Signal() Signal {
	return Signal{Name: c.Name, ID: c.ID, By: c.By, Channel: c.Channel, At: c.At, ConsumedBy: c.Step}
}

// MaxConsumedSignals bounds Run.Consumed: the oldest entries leave first,
// after which a retry of their signal would be taken as a new one.
const MaxConsumedSignals = 256

// SignalDataSHA256 is the digest Run.Consumed keeps of a signal's data.
func SignalDataSHA256(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Pending reports whether a step may still read s: not consumed (by a
// record written before consumed signals left the record).
func (s Signal) Pending() bool { return s.ConsumedBy == 0 }

// ConsumeSignals moves the signals of ids off run's pending list: a
// signal into Consumed (the newest MaxConsumedSignals kept), the marker
// of an expiry away. Step is the step whose commit (or park) read them.
// Signals a record written by an earlier version marked consumed move
// too. It never writes into the slices run was read with.
func (r *Run) ConsumeSignals(step int, ids []string) {
	legacy := false
	for _, s := range r.Signals {
		legacy = legacy || !s.Pending()
	}
	if len(ids) == 0 && !legacy {
		return
	}
	var pending []Signal
	consumed := append([]ConsumedSignal(nil), r.Consumed...)
	for _, s := range r.Signals {
		by := s.ConsumedBy
		if by == 0 && slices.Contains(ids, s.ID) {
			by = step
		}
		switch {
		case by == 0:
			pending = append(pending, s)
		case !s.Expired:
			consumed = append(consumed, ConsumedSignal{ID: s.ID, Name: s.Name, By: s.By, Channel: s.Channel, At: s.At, Step: by, DataSHA256: SignalDataSHA256(s.Data)})
		}
	}
	if n := len(consumed) - MaxConsumedSignals; n > 0 {
		consumed = consumed[n:]
	}
	r.Signals, r.Consumed = pending, consumed
}

// MaxSignalBytes bounds a signal's data; larger data belongs in the blob
// store, with its reference in the signal.
const MaxSignalBytes = 64 << 10

// ValidSignalName reports whether name can name a signal: 1-64 letters,
// digits, '-' or '_'.
func ValidSignalName(name string) bool { return len(name) <= 64 && ValidID(name) }

// IsApproval reports whether the wait is for a decision (the kinds Decide
// and the approval expiry policies apply to).
func (w *Wait) IsApproval() bool { return w.Kind == "" || w.Kind == WaitApproval }

// Wait is a parked run's pending approval request, or its timer.
type Wait struct {
	// Kind is WaitApproval (also when empty) or WaitTimer.
	Kind          string          `json:"kind,omitempty"`
	Step          int             `json:"step"`
	StepName      string          `json:"step_name"`
	Payload       json.RawMessage `json:"payload"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Group         string          `json:"group"`
	Since         time.Time       `json:"since"`
	Deadline      time.Time       `json:"deadline"`
	// Name is the signal a signal wait waits for.
	Name string `json:"name,omitempty"`
	// OnExpiry is the expiry policy: "reject", "escalate" or "remind".
	OnExpiry   string `json:"on_expiry,omitempty"`
	EscalateTo string `json:"escalate_to,omitempty"`
	Reminders  int    `json:"reminders,omitempty"`
}

// Verdict is what a decision on an approval said.
type Verdict string

// Verdicts recorded on a run.
const (
	DecisionApproved Verdict = "approved"
	DecisionRejected Verdict = "rejected"
)

// Approval is one recorded decision: who, when, through which channel, and the
// exact payload they saw.
type Approval struct {
	Step          int             `json:"step"`
	By            string          `json:"by"`
	At            time.Time       `json:"at"`
	Decision      Verdict         `json:"decision"`
	Channel       string          `json:"channel"`
	PayloadSHA256 string          `json:"payload_sha256"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	// PayloadBlob is set, and Payload empty, when the payload is stored
	// apart (over InlineBytes): the hex SHA-256 of its bytes (History.Blob).
	PayloadBlob string `json:"payload_blob,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// ReasonBlob is set, and Reason empty, for a reason stored apart.
	ReasonBlob string `json:"reason_blob,omitempty"`
}

// Approved reports whether the decision approved (a rejection, by a
// person or by an expiry policy, does not).
func (a Approval) Approved() bool { return a.Decision == DecisionApproved }

// Audit event kinds.
const (
	AuditParked    = "parked"    // the run parked with a payload
	AuditReparked  = "reparked"  // resumed, the payload changed, parked again
	AuditDecision  = "decision"  // approved or rejected
	AuditExpired   = "expired"   // the TTL passed and the policy rejected
	AuditEscalated = "escalated" // the TTL passed and the request moved group
	AuditReminded  = "reminded"  // the TTL passed and a reminder went out
	AuditRefused   = "refused"   // an approval was refused (bad hash, group...)
	AuditTimer     = "timer"     // a durable timer fired
	AuditRedriven  = "redriven"  // an operator put a dead run back to work
	AuditChildren  = "children"  // every child run ended; the run resumed
	AuditSignal    = "signal"    // a signal was delivered
	AuditCancelled = "cancelled" // someone cancelled the run
)

// AuditEntry is one recorded event of a run's waits.
type AuditEntry struct {
	Kind          string    `json:"kind"`
	Step          int       `json:"step"`
	At            time.Time `json:"at"`
	By            string    `json:"by,omitempty"`
	Channel       string    `json:"channel,omitempty"`
	Group         string    `json:"group,omitempty"`
	Decision      Verdict   `json:"decision,omitempty"`
	PayloadSHA256 string    `json:"payload_sha256,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	// ReasonBlob is set, and Reason empty, for a reason over InlineBytes
	// stored apart: the hex SHA-256 of its bytes (History.Blob).
	ReasonBlob string `json:"reason_blob,omitempty"`
}

// Checkpoint is the durable output of one step.
type Checkpoint struct {
	RunID string `json:"run_id"`
	Step  int    `json:"step"`
	// Name of the workflow step that ran.
	Name string `json:"name"`
	// State is the step's output state (JSON), the input of step Step+1.
	State json.RawMessage `json:"state"`
	// Next names the step to run next; empty when the run ended here.
	Next string `json:"next,omitempty"`
	// Status is the run's status after this step.
	Status Status `json:"status"`
	// WakeAt is when a run that sleeps after this step wakes (a durable timer).
	WakeAt  time.Time    `json:"wake_at,omitzero"`
	Journal []CallRecord `json:"journal,omitempty"`
	Effects []Effect     `json:"effects,omitempty"`
	// Error says why the run failed, when the step ended it as failed.
	Error string `json:"error,omitempty"`
	// Gen is the run's resume generation (Run.Resumes) the committing
	// attempt ran under. A checkpoint of step n from an earlier generation
	// (an attempt that ran before the run parked at n and was decided, and
	// whose commit lost) is not step n's result: the step runs again.
	Gen int `json:"gen,omitempty"`
	// Branch is i for the checkpoint of branch i of a fan-out (Step is then
	// the fan-out's join step), 0 for a step of the run's linear history.
	// A branch checkpoint with Status StatusDead is the branch's failure
	// (see Store.CommitBranch), not a result.
	Branch int `json:"branch,omitempty"`
	// Of is, on a branch's checkpoint, how many branches its fan-out has
	// (0 on checkpoints written before it was recorded): a store may
	// count the fan-out's results in full only when they may all be in.
	Of int `json:"of,omitempty"`
	// Redrives is the run's Redrives under which a branch's outcome was
	// stored: a branch's failure holds until the run is redriven.
	Redrives int `json:"redrives,omitempty"`
	// FanOut is set on the checkpoint of a step that fanned out: the
	// branches to run before the join, step Step+1, named by Next.
	FanOut *FanOut `json:"fan_out,omitempty"`
	// Signals are the ids of the signals the step consumed.
	Signals []string `json:"signals,omitempty"`
	// Children is set on the checkpoint of a step that started child runs:
	// the run waits at step Step+1 until every one has ended.
	Children []Child `json:"children,omitempty"`
	// Attempt is the delivery that committed the step (1 = first).
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	// Spend is what the committing attempt reported spending.
	Spend float64 `json:"spend,omitempty"`
	// DurationMS is how long the step body ran in the committing attempt.
	DurationMS float64 `json:"duration_ms"`
	// Resource and SlotWaitMS: the committing attempt queued SlotWaitMS
	// for a slot of Resource's concurrency limit before its body ran
	// (steps.Uses); unset when it found one free.
	Resource   string  `json:"resource,omitempty"`
	SlotWaitMS float64 `json:"slot_wait_ms,omitempty"`
	// TokenResource and TokenWaitMS: the committing attempt's calls
	// waited TokenWaitMS in all for tokens of TokenResource's rate limit
	// (steps.Resource): asleep in the step, and handed back to the queue
	// before the attempt (see pkg/worker's tokenwait.go for how that is
	// measured). Unset when no call waited. With waits for several
	// resources, TokenResource is the first's and TokenWaitMS their sum.
	TokenResource string  `json:"token_resource,omitempty"`
	TokenWaitMS   float64 `json:"token_wait_ms,omitempty"`
}

// Size is the length of cp's JSON document, computed without encoding
// it: exact for the variable parts (state, names, recorded results and
// errors, effect keys), an upper bound for the fixed ones (numbers and
// times at their widest). It undercounts only the escapes the encoder
// adds (a quote in a name, '<' '>' '&' in state strings): a budget is a
// guard against megabytes, not an exact limit. It is what a Budget
// checks, once per step, without encoding the checkpoint a second time.
func (cp Checkpoint) Size() int {
	// {"run_id":"","step":,"name":"","state":,"status":"","attempt":,"at":"","duration_ms":} with
	// a 20-digit step and attempt, a 35-byte time, a 24-byte duration.
	n := 88 + 20 + 20 + 35 + 24 + len(cp.RunID) + len(cp.Name) + len(cp.State) + len(cp.Status)
	if len(cp.State) == 0 {
		n += len("null")
	}
	if cp.Next != "" {
		n += len(`,"next":""`) + len(cp.Next)
	}
	if !cp.WakeAt.IsZero() {
		n += len(`,"wake_at":""`) + 35
	}
	if cp.Spend != 0 {
		n += len(`,"spend":`) + 24
	}
	if cp.Error != "" {
		n += len(`,"error":""`) + len(cp.Error)
	}
	if cp.Resource != "" {
		n += len(`,"resource":"","slot_wait_ms":`) + len(cp.Resource) + 24
	}
	if cp.TokenResource != "" {
		n += len(`,"token_resource":"","token_wait_ms":`) + len(cp.TokenResource) + 24
	}
	if cp.Gen != 0 {
		n += len(`,"gen":`) + 20
	}
	if len(cp.Journal) > 0 {
		n += len(`,"journal":[]`)
		for _, r := range cp.Journal {
			// {"name":"","args_sha256":"","at":""},
			n += 37 + len(r.Name) + len(r.ArgsSHA256) + 35
			if len(r.Result) > 0 {
				n += len(`,"result":`) + len(r.Result)
			}
			if r.Error != "" {
				n += len(`,"error":""`) + len(r.Error)
			}
			if r.Note != "" {
				n += len(`,"note":""`) + len(r.Note)
			}
			if r.Replayed {
				n += len(`,"replayed":true`)
			}
		}
	}
	if cp.Branch != 0 {
		n += len(`,"branch":`) + 20 + len(`,"of":`) + 20
	}
	if cp.Redrives != 0 {
		n += len(`,"redrives":`) + 20
	}
	if cp.FanOut != nil {
		n += cp.FanOut.size()
	}
	if len(cp.Signals) > 0 {
		n += len(`,"signals":[]`)
		for _, id := range cp.Signals {
			n += len(`"",`) + len(id)
		}
	}
	if len(cp.Children) > 0 {
		n += len(`,"children":[]`)
		for _, c := range cp.Children {
			n += len(`{"run_id":"","workflow":"","input":},`) + len(c.ID) + len(c.Workflow) + len(c.Input)
		}
	}
	if len(cp.Effects) > 0 {
		n += len(`,"effects":[]`)
		for _, e := range cp.Effects {
			n += len(`{"key":"","replayed":false},`) + len(e.Key)
		}
	}
	return n
}

// Failed reports whether cp is a branch's stored failure (see
// Store.CommitBranch) rather than its result.
func (cp Checkpoint) Failed() bool { return cp.Branch > 0 && cp.Status == StatusDead }

// FanOut is what a step that fans out commits: the branches, each a step
// of the workflow run on its own input, in parallel. Branch i (from 1)
// has the idempotency key "<run>:step<n+1>.<i>", where n is the fan-out's
// step; the join is step n+1 and runs once every branch is committed.
type FanOut struct {
	Branches []Branch `json:"branches"`
}

// Branch is one branch of a fan-out: the step that runs it and its input.
type Branch struct {
	Step  string          `json:"step"`
	Input json.RawMessage `json:"input,omitempty"`
}

// size is the length of f's JSON document and its field name in a
// checkpoint (see Checkpoint.Size).
func (f *FanOut) size() int {
	n := len(`,"fan_out":{"branches":[]}`)
	for _, b := range f.Branches {
		n += len(`{"step":"","input":},`) + len(b.Step) + len(b.Input)
	}
	return n
}

// Child is a child run a step starts: its id, workflow and input.
type Child struct {
	ID       string          `json:"run_id"`
	Workflow string          `json:"workflow"`
	Input    json.RawMessage `json:"input,omitempty"`
}

// MaxBranches bounds the branches of one fan-out: each is a step message,
// a checkpoint and a key of its own, and the join reads them all.
const MaxBranches = 1000

// CallRecord journals one model or tool call made inside a step.
type CallRecord struct {
	Name       string          `json:"name"`
	ArgsSHA256 string          `json:"args_sha256"`
	Result     json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	// Note is a one-line description for people reading the run (`durable
	// runs show`): the model and tokens of a model call, the tool and key
	// of a tool call. Not part of the call's identity.
	Note string    `json:"note,omitempty"`
	At   time.Time `json:"at"`
	// Replayed is set on the copy returned to a retried step that read the
	// recorded result instead of calling again.
	Replayed bool `json:"replayed,omitempty"`
}

// Effect is a side effect performed with an idempotency key.
type Effect struct {
	Key string `json:"key"`
	// Replayed: the provider answered with the original result (the key had
	// been used before), or the journal held the result.
	Replayed bool `json:"replayed"`
}

// Snapshot is what a worker needs to run step n, read in one round trip
// (Store.Load). For a branch of the fan-out whose join is step n, Current,
// Journal and Failures are the branch's own.
type Snapshot struct {
	Run Run
	// Current is checkpoint n, nil when step n has not been committed. A
	// worker takes it as step n's result only if its Gen is the run's
	// Resumes (see Checkpoint.Gen).
	Current *Checkpoint
	// Previous is checkpoint n-1, nil for step 1 or when missing.
	Previous *Checkpoint
	// Journal holds the calls already recorded for step n, by earlier attempts.
	Journal []CallRecord
	// Failures recorded for step n, oldest first: at most the last
	// MaxFailureRecords of them.
	Failures []Failure
	// BranchSpend is set by Load of a branch only: what the results of
	// the fan-out's branches committed so far reported spending (their
	// Checkpoint.Spend), each counted once (see Store.CommitBranch). The
	// max-spend cap counts it while the branches run; the run record
	// counts it only when the join commits.
	BranchSpend float64
}

// Failure is one failed attempt of a step body.
type Failure struct {
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	At      time.Time `json:"at"`
}

// Failure records stay small: a store cuts Error to MaxFailureError bytes
// and keeps the last MaxFailureRecords records of a step. The count
// RecordFailure returns stays exact past that.
const (
	MaxFailureError   = 1 << 10
	MaxFailureRecords = 50
)

// Trimmed returns f as a store keeps it: Error made valid UTF-8 and cut to
// at most MaxFailureError bytes on a character boundary, At set to now when
// zero.
func (f Failure) Trimmed() Failure {
	f.Error = strings.ToValidUTF8(f.Error, "\uFFFD")
	if len(f.Error) > MaxFailureError {
		i := MaxFailureError
		for i > 0 && !utf8.RuneStart(f.Error[i]) {
			i--
		}
		f.Error = f.Error[:i]
	}
	if f.At.IsZero() {
		f.At = time.Now().UTC()
	}
	return f
}

// Filter selects runs for ListRuns. Zero values match everything.
type Filter struct {
	Status   Status
	Workflow string
}

// WorkflowInfo is what a worker advertises about a workflow it can run, so
// that `durable start` can refuse unknown workflows.
type WorkflowInfo struct {
	Name      string   `json:"name"`
	Version   int      `json:"version"`
	FirstStep string   `json:"first_step"`
	Steps     []string `json:"steps"`
	// Signals the workflow's steps wait for; a signal of another name is
	// refused.
	Signals []string `json:"signals,omitempty"`
	// SignalGroups names, per signal, the token groups that may send it
	// through the approver's API (steps.Workflow.Signal). A signal
	// without an entry, and every signal of a record written before this
	// field existed, may be sent by any valid token.
	SignalGroups map[string][]string `json:"signal_groups,omitempty"`
	// InputSchema a run's input must match when it starts (see
	// steps.Workflow.InputSchema); empty: any JSON object.
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// Budget bounds checkpoint size: over Warn a commit is logged, over Max it is
// refused with a *TooLargeError.
type Budget struct {
	// Warn is the size in bytes above which a warning is logged. Default 64 KiB.
	Warn int
	// Max is the size in bytes above which a checkpoint is refused. Default 512 KiB.
	Max int
}

// DefaultBudget is used when a Budget field is zero.
var DefaultBudget = Budget{Warn: 64 << 10, Max: 512 << 10}

// TooLargeError refuses a checkpoint over budget.
type TooLargeError struct {
	RunID string
	Step  int
	Size  int
	Max   int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("checkpoint %s:%d is %d bytes, over the budget of %d: a large artefact (a document, file, screenshot or tool output) does not belong in step state: store it with PutBlob and keep the reference in the state", e.RunID, e.Step, e.Size, e.Max)
}

// Check returns whether size is over the warning level, and a *TooLargeError
// when it is over the maximum.
func (b Budget) Check(runID string, step, size int) (warn bool, err error) {
	if b.Warn <= 0 {
		b.Warn = DefaultBudget.Warn
	}
	if b.Max <= 0 {
		b.Max = DefaultBudget.Max
	}
	if size > b.Max {
		return true, &TooLargeError{RunID: runID, Step: step, Size: size, Max: b.Max}
	}
	return size > b.Warn, nil
}
