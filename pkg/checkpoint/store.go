package checkpoint

import (
	"context"
	"time"
)

// Store persists runs, checkpoints and call journals. Implementations:
// redisstore (fleet default) and kvstore (JetStream KV, embedded default).
// Every implementation passes checkpointtest.Run.
//
// Its methods come in four roles, one interface each: Runs, Steps,
// DueIndex and Registry. Code that needs one role can take that
// interface alone; a Store is each of them.
type Store interface {
	Runs
	Steps
	DueIndex
	Registry
}

// Runs is the store of run records. A client (pkg/client, and the CLI
// and the approver through it) starts, reads, lists and changes runs with
// it; a worker reads a run and moves it when no step commits (a park, a
// dead letter); the scheduler lists the runs it sweeps and the metrics
// count them.
type Runs interface {
	// CreateRun stores a new run. If the id is taken it returns the existing
	// run and ErrRunExists, and changes nothing.
	CreateRun(ctx context.Context, run Run) (Run, error)
	// GetRun returns the run or ErrNotFound.
	GetRun(ctx context.Context, id string) (Run, error)
	// ListRuns returns the runs matching f, oldest first. It reads the
	// index, so it costs what the runs that match cost: a listing of live
	// statuses (running, waiting) costs the live work; one of every run,
	// or of an ended status, costs the history the store keeps. Listings
	// for people page with PageRuns.
	ListRuns(ctx context.Context, f Filter) ([]Run, error)
	// PageRuns returns one page of the runs matching q, newest first (see
	// Cursor): it reads the page's runs and index entries, whatever the
	// store holds besides. An invalid query is refused (q.Validate).
	PageRuns(ctx context.Context, q PageQuery) (RunPage, error)
	// CountRuns reads the index's counters: runs per status, in all and
	// per workflow, without reading any run.
	CountRuns(ctx context.Context) (RunCounts, error)
	// UpdateRun replaces the run if run.Rev is still the stored revision
	// (ErrConflict otherwise) and returns it with its new Rev.
	UpdateRun(ctx context.Context, run Run) (Run, error)
}

// Steps is the store of what steps and fan-out branches did: their
// checkpoints, call journals and failures, each for one step or branch
// (a StepRef). A worker reads before it runs a step or branch (Load),
// journals its calls and counts its failures while it runs, and commits
// after (Commit, CommitBranch); a client (`durable runs show`) and the
// scheduler read the committed checkpoints.
type Steps interface {
	// Load reads what a worker needs to run the step or branch at of run
	// id. For step n (AtStep(n)): the run, checkpoints n (Current) and n-1
	// (Previous), and the journal and failures of step n. For branch i of
	// the fan-out whose join is step n (AtBranch(n, i)): the run, the
	// branch's stored outcome (Current, nil while there is none; a
	// result, or a failure as CommitBranch says), the fan-out's
	// checkpoint n-1 (Previous), the branch's journal and failures, and
	// what the fan-out's committed results spent (BranchSpend). A branch
	// whose join is before step 2, or numbered below 1, is refused.
	Load(ctx context.Context, id string, at StepRef) (Snapshot, error)
	// RecordCall journals a call of the step or branch at, first writer
	// wins by rec.Name, and returns the record that is stored (the
	// caller's or an earlier one). Each branch has a journal of its own,
	// apart from its join's.
	RecordCall(ctx context.Context, id string, at StepRef, rec CallRecord) (CallRecord, error)
	// RecordFailure records that an attempt of the step or branch at of
	// run id failed and returns how many failures it has recorded in all
	// (this one included); each branch counts its own, apart from its
	// join's. Concurrent calls each count once. The record is stored as
	// f.Trimmed(); ErrNotFound when the run does not exist. Steps and
	// branches count from 1.
	RecordFailure(ctx context.Context, id string, at StepRef, f Failure) (int, error)
	// Commit writes cp (step cp.Step) first-writer-wins together with run,
	// atomically, provided run.Rev is still the stored revision. It returns
	// the stored run with its new Rev. ErrCheckpointExists when the step was
	// already committed (nothing written), ErrConflict when the run moved.
	Commit(ctx context.Context, run Run, cp Checkpoint) (Run, error)
	// CommitBranch writes the outcome of branch cp.Branch of the fan-out
	// whose join is step cp.Step on the branch's own key, first writer
	// wins, and returns how many of the fan-out's branches it counted
	// committed after its write. The outcome is a result, or the branch's
	// failure: a checkpoint with Status StatusDead, which is not counted,
	// not listed by BranchCheckpoints, and holds only for the run's
	// Redrives it was stored under: the first outcome written with a
	// higher cp.Redrives replaces it. Any other outcome stored before is
	// not written over: ErrCheckpointExists (Load says which), with
	// the count all the same when the stored outcome is a result, so that
	// a writer that died before acting on its count learns it on
	// redelivery. A result's Spend joins the fan-out's sum (see
	// Snapshot.BranchSpend) once, at the latest when the CommitBranch
	// calls running when it was stored have returned: a store may leave
	// it to a later writer that is bound to count after it, as with the
	// count.
	// Once every branch is committed, at least one of their
	// writers counts them all; a store may answer 0 to a writer when a
	// later one is bound to count after it, and answers 0 to a failure's.
	// ErrNotFound when the run does not exist.
	CommitBranch(ctx context.Context, cp Checkpoint) (int, error)
	// Checkpoint returns checkpoint n of run id, or ErrNotFound.
	Checkpoint(ctx context.Context, id string, n int) (Checkpoint, error)
	// Checkpoints returns all checkpoints of run id in step order.
	Checkpoints(ctx context.Context, id string) ([]Checkpoint, error)
	// BranchCheckpoints returns the committed checkpoints among branches
	// 1..total of the fan-out whose join is step n, in branch order:
	// results only, never a stored failure.
	BranchCheckpoints(ctx context.Context, id string, n, total int) ([]Checkpoint, error)
}

// DueIndex is the deadline index of parked runs: a worker parking a run
// with a deadline puts it in (IndexDue), and the scheduler claims the
// runs that are due, expires or wakes them and moves their entries on
// (ClaimDue, FinishDue). The run records stay the truth: the scheduler
// repairs a missing entry from them.
type DueIndex interface {
	// IndexDue puts run id in the deadline index at time at (replacing an
	// earlier entry): the scheduler claims it once at is past. The index is
	// separate from the run record (one Redis Cluster slot per run); a
	// missing entry is repaired by the scheduler from the run records.
	IndexDue(ctx context.Context, id string, at time.Time) error
	// UnindexDue removes run id from the deadline index (no error if absent).
	UnindexDue(ctx context.Context, id string) error
	// ClaimDue atomically claims up to limit run ids whose due time is at or
	// before now, hiding each from other claimers for lease: concurrent
	// schedulers never claim the same entry at once, and an entry whose
	// claimer died is claimed again after the lease. The claimer removes
	// or re-indexes the entry when it is done. Ids come in the order they
	// became claimable (the due time, or the end of a lapsed lease); times
	// count in milliseconds; limit must be at least 1 and lease at least 1ms.
	ClaimDue(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]string, error)
	// FinishDue ends the claims of the runs in done that one ClaimDue made
	// at now with lease (leaseUntil = now + lease), all in one call (one
	// round trip where the store can): each entry still as that claim left
	// it moves to its Next, or is removed when Next is zero. An entry
	// written since, by a worker parking the run again (IndexDue) or by a
	// later claim after the lease lapsed, is left alone: the claimer's
	// view of the run is older than that writer's. No error for an absent
	// entry; an invalid id fails the call before any entry changes.
	FinishDue(ctx context.Context, leaseUntil time.Time, done ...DueNext) error
}

// Registry is the list of workflows the workers can run. A worker
// registers each of its workflows when it starts; a client and the
// approver read them to refuse a run of an unknown workflow, an input
// that does not match its schema, or a signal the workflow does not take.
type Registry interface {
	// RegisterWorkflow records (or refreshes) a workflow a worker runs.
	RegisterWorkflow(ctx context.Context, info WorkflowInfo) error
	// Workflows lists registered workflows, one entry per name and version.
	Workflows(ctx context.Context) ([]WorkflowInfo, error)
}

// DueNext is where FinishDue moves run ID's entry of the deadline index:
// to Next, or out of the index when Next is zero (the run is due no more).
type DueNext struct {
	ID   string
	Next time.Time
}
