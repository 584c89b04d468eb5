// Package transition is where a run changes: a change of a run is an
// Event, and Apply, a pure function of the run as stored, the event and
// the time, says what the run becomes and what must follow (Commands).
// The callers load the run, apply the event, store the result with a
// compare-and-set on the run's revision (looking again when another
// writer came first), then carry out the commands.
//
// Its events are those of the operators, approvers and systems that act
// on a run through pkg/client (Start, Decide, Refuse, Cancel, Signal,
// Redrive), the end of a run's child runs (ChildrenEnded), the
// scheduler's (Expire, Repair) and the worker's (Commit, Follow,
// ParkForApproval, ParkForSignal, Die, BranchCommitted, BranchDied).
//
// Message ids are minted here, from the run as stored after the change
// (pkg/queue spells them): a step's regular id "<run>:<n>" is minted by
// the commit that moves the run onto step n by itself (or the run's
// creation, for step 1); a resume carries the run's generation, which
// grows with every decision, signal, approval's or signal's expiry and
// redrive; a timer's wake and the children's resume are once per sleep
// or start of children, under causes of their own. A command that
// publishes again what an earlier change published says so (Again) and
// mints nothing.
package transition

import (
	"errors"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Refusals of an event; pkg/client names them for its callers.
var (
	// ErrNotWaiting: the run is not parked for approval.
	ErrNotWaiting = errors.New("run is not waiting for approval")
	// ErrStaleHash: the approval names a payload other than the one pending.
	ErrStaleHash = errors.New("approval names a payload that is not the pending one")
	// ErrForbidden: the decider is not in the group the request names, or
	// the four-eyes rule forbids them (they started the run).
	ErrForbidden = errors.New("not allowed to decide this run")
	// ErrWrongStep: the decision names a step other than the parked one.
	ErrWrongStep = errors.New("decision names another step")
	// ErrNotActive: the run already ended.
	ErrNotActive = errors.New("run already ended")
)

// Event is a change asked of a run.
type Event interface {
	apply(run checkpoint.Run, now time.Time) Result
}

// Result is what an event does to a run.
type Result struct {
	// Run is the run to store when Store is set, else the run as read.
	Run checkpoint.Run
	// Store: Run must be written, compare-and-set on the revision it
	// was read at; on a conflict the caller reads the run and applies
	// the event again.
	Store bool
	// Resumed: the run waited and runs again, a generation later.
	Resumed bool
	// Commands follow, in order, once Run is stored (or at once when
	// nothing is to be stored), each given the stored run.
	Commands []Command
	// Err refuses the event: nothing is stored; Commands still follow
	// (a resume owed by an earlier decision is published again).
	Err error
	// Expiry is what an Expire did; zero for other events.
	Expiry Expiry
}

// Apply applies ev to run at now. It does not change run: the slices of
// the result are its own.
func Apply(run checkpoint.Run, ev Event, now time.Time) Result {
	return ev.apply(run, now.UTC())
}

// Command is what must follow a stored change, carried out by the
// caller with the stored run.
type Command interface{ command() }

// PublishStatus publishes the run's status event (queue.StatusEvent).
// Best effort: the record is the truth.
type PublishStatus struct{}

// PublishStep publishes the step at the run's cursor under MsgID. A
// failure is reported as Lost says (what was stored, what to do), or not
// at all when BestEffort (a republish of what an earlier change owed:
// that change reported it).
type PublishStep struct {
	MsgID string
	Lost  string
	// Again: the publish is a republish of what an earlier stored change
	// published, under the id that change minted (its first publish may
	// have failed); the stream drops it within its duplicate window, and
	// the step protocol a stale one after it. It mints nothing.
	Again bool
	// Repair: the publish presents the step at the cursor again under an
	// id of the stuck state it repairs (Repair), without a change of
	// the run.
	Repair     bool
	BestEffort bool
}

// PublishReminder publishes Reminder as a reminder event under MsgID.
type PublishReminder struct {
	MsgID    string
	Reminder Reminder
}

// CancelChildren cancels the run's live child runs, as By through
// Channel.
type CancelChildren struct{ By, Channel string }

// NotifyParent tells the run's parent, if it has one, that the run
// ended.
type NotifyParent struct{}

func (PublishStatus) command()   {}
func (PublishStep) command()     {}
func (CancelChildren) command()  {}
func (NotifyParent) command()    {}
func (PublishReminder) command() {}

// appended is s with v after it, in a new array: a run read from a store
// may share its slices with the caller's copy.
func appended[T any](s []T, v T) []T {
	return append(append(make([]T, 0, len(s)+1), s...), v)
}
