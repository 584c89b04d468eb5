package transition

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// ErrNotAtStep: a worker's event names a step the run is not running (it
// moved on, or waits, or ended, since the worker read it).
var ErrNotAtStep = errors.New("run is not running that step")

// ErrSignalPending: a step waits for a signal the run holds already, which
// it should have read (Context.Signal).
var ErrSignalPending = errors.New("step awaits a signal that is pending")

// DefaultWaitTTL is how long a wait lasts when its step gives no TTL.
const DefaultWaitTTL = 72 * time.Hour

// IndexDue indexes the run's deadline At for the scheduler. Best effort:
// the scheduler's repair indexes a waiting run it finds unindexed.
type IndexDue struct{ At time.Time }

// DeadLetter publishes the run's dead letter for the step that killed it.
type DeadLetter struct{}

func (IndexDue) command()   {}
func (DeadLetter) command() {}

// ParkForApproval is the worker's: the step at the run's cursor asks a
// person or system for an approval of Payload (JSON) and the run waits
// for the decision until TTL passes (DefaultWaitTTL when 0), then
// OnExpiry: "reject" (the default), "escalate" to EscalateTo, or "remind"
// Reminders times.
type ParkForApproval struct {
	Step              int
	Payload           []byte
	Group, EscalateTo string
	OnExpiry          string
	Reminders         int
	TTL               time.Duration
}

func (p ParkForApproval) apply(run checkpoint.Run, now time.Time) Result {
	if err := runningAt(run, p.Step); err != nil {
		return Result{Run: run, Err: err}
	}
	sum := sha256.Sum256(p.Payload)
	hash := hex.EncodeToString(sum[:])
	onExpiry := p.OnExpiry
	if onExpiry == "" {
		onExpiry = "reject"
	}
	kind, reason := checkpoint.AuditParked, ""
	for i := len(run.Approvals) - 1; i >= 0; i-- {
		if a := run.Approvals[i]; a.Step == p.Step {
			// Resumed by a decision on another payload: the facts changed.
			kind = checkpoint.AuditReparked
			reason = "the payload changed since the decision of " + a.By + " on " + a.PayloadSHA256
			break
		}
	}
	next := run
	next.Status, next.UpdatedAt = checkpoint.StatusWaiting, now
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: kind, Step: p.Step, At: now, Group: p.Group, PayloadSHA256: hash, Reason: reason,
	})
	next.Wait = &checkpoint.Wait{
		Step: p.Step, StepName: run.StepName, Payload: p.Payload,
		PayloadSHA256: hash, Group: p.Group,
		Since: now, Deadline: now.Add(ttlOr(p.TTL)), OnExpiry: onExpiry,
		EscalateTo: p.EscalateTo, Reminders: p.Reminders,
	}
	return Result{Run: next, Store: true, Commands: []Command{PublishStatus{}, IndexDue{At: next.Wait.Deadline}}}
}

// ParkForSignal is the worker's: the step at the run's cursor waits for a
// signal of Name until TTL passes (DefaultWaitTTL when 0). An expiry
// marker of the name the step read is spent: waiting again starts a new
// wait. A pending signal of the name refuses it (ErrSignalPending): the
// step runs again and reads it.
type ParkForSignal struct {
	Step int
	Name string
	TTL  time.Duration
}

func (p ParkForSignal) apply(run checkpoint.Run, now time.Time) Result {
	if err := runningAt(run, p.Step); err != nil {
		return Result{Run: run, Err: err}
	}
	var expired []string
	for _, s := range run.Signals {
		switch {
		case !s.Pending() || s.Name != p.Name:
		case s.Expired:
			expired = append(expired, s.ID)
		default:
			return Result{Run: run, Err: fmt.Errorf("step awaits signal %s while one is pending: read it with Context.Signal: %w", p.Name, ErrSignalPending)}
		}
	}
	next := run
	next.Status, next.UpdatedAt = checkpoint.StatusWaiting, now
	next.ConsumeSignals(p.Step, expired)
	next.Wait = &checkpoint.Wait{Kind: checkpoint.WaitSignal, Name: p.Name, Step: p.Step, StepName: run.StepName, Since: now, Deadline: now.Add(ttlOr(p.TTL))}
	next.Audit = appended(run.Audit, checkpoint.AuditEntry{
		Kind: checkpoint.AuditParked, Step: p.Step, At: now, Reason: "waits for signal " + p.Name + " until " + next.Wait.Deadline.Format(time.RFC3339),
	})
	return Result{Run: next, Store: true, Commands: []Command{PublishStatus{}, IndexDue{At: next.Wait.Deadline}}}
}

// Die is the worker's: the step it ran failed for good (Reason), ran
// out of attempts, or could not go on (children that cannot start). The
// run is dead until an operator redrives it; its dead letter says why.
// The worker applies it to the run as it read it, so a change since
// makes the store refuse it; an ended run refuses it (ErrNotActive).
type Die struct{ Reason string }

func (e Die) apply(run checkpoint.Run, now time.Time) Result {
	if run.Status.Terminal() {
		return Result{Run: run, Err: fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrNotActive)}
	}
	next := run
	next.Status, next.Error, next.UpdatedAt = checkpoint.StatusDead, e.Reason, now
	next.Wait = nil
	return Result{Run: next, Store: true, Commands: []Command{PublishStatus{}, NotifyParent{}, DeadLetter{}}}
}

// runningAt refuses a worker's event on a run not running step n.
func runningAt(run checkpoint.Run, n int) error {
	if run.Status != checkpoint.StatusRunning || run.Step != n {
		return fmt.Errorf("run %s is %s at step %d, not running step %d: %w", run.ID, run.Status, run.Step, n, ErrNotAtStep)
	}
	return nil
}

func ttlOr(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return DefaultWaitTTL
	}
	return ttl
}

// BranchDied is the worker's: branch Mark.Branch of the fan-out joined at
// step Mark.Step failed for good, and its failure (Mark, status dead) won
// the branch's own key. The run dies with it unless it is past the
// fan-out: redriven since (the branch runs again; ErrNotAtStep), moved
// on or no longer running (ErrNotActive). A run this branch already
// killed changes nothing, and its dead letter is published again (a
// writer may have died before publishing it; the stream drops a copy).
type BranchDied struct{ Mark checkpoint.Checkpoint }

func (b BranchDied) apply(run checkpoint.Run, now time.Time) Result {
	m := b.Mark
	switch {
	case run.Redrives != m.Redrives || run.Step != m.Step:
		return Result{Run: run, Err: fmt.Errorf("run %s is at step %d after %d redrives; the branch died at step %d after %d: %w", run.ID, run.Step, run.Redrives, m.Step, m.Redrives, ErrNotAtStep)}
	case run.Status == checkpoint.StatusDead && run.FailedBranch == m.Branch:
		return Result{Run: run, Commands: []Command{DeadLetter{}}}
	case run.Status != checkpoint.StatusRunning:
		return Result{Run: run, Err: fmt.Errorf("run %s is %s: %w", run.ID, run.Status, ErrNotActive)}
	}
	next := run
	next.Status, next.Error, next.UpdatedAt = checkpoint.StatusDead, m.Error, now
	next.FailedBranch, next.Wait = m.Branch, nil
	return Result{Run: next, Store: true, Commands: []Command{PublishStatus{}, NotifyParent{}, DeadLetter{}}}
}

// BranchCommitted is the worker's: a branch of the fan-out joined at
// Step committed (or was found committed by a replay), and the store
// counted Count of its Of branches in (0: a later writer counts). When
// all are in and the run still waits at the join, the join is published
// (PublishJoin). Branch commits never change the run record: nothing is
// stored.
type BranchCommitted struct{ Step, Count, Of int }

// PublishJoin publishes the join, the step at the run's cursor, under
// MsgID. Every writer that counts all branches in publishes it; the
// stream keeps one.
type PublishJoin struct{ MsgID string }

func (PublishJoin) command() {}

func (b BranchCommitted) apply(run checkpoint.Run, now time.Time) Result {
	if b.Of == 0 || b.Count != b.Of || run.Status != checkpoint.StatusRunning || run.Step != b.Step {
		return Result{Run: run}
	}
	return Result{Run: run, Commands: []Command{PublishJoin{MsgID: queue.JoinMsgID(run, b.Step)}}}
}
