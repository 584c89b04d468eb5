package transition_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/transition"
)

// sequences is how many generated event sequences TestModel applies:
// 10,000, or 1,000 under the race detector. The sequences are a pure
// function applied in one goroutine, with no race to find, and cost ten
// times as much under it; `make test` runs the 10,000 without it too
// (its target model).
var sequences = map[bool]int{false: 10000, true: 1000}[raceBuild]

// world is a run and what was published for it: the model's memory of a
// sequence, which the invariants are checked against after every event.
type world struct {
	run checkpoint.Run
	// published maps each step message id sent as new (not a
	// best-effort republish) to the step it carried.
	published map[string]string
	// reminders maps each reminder id sent to what it said.
	reminders map[string]transition.Reminder
	now       time.Time
	// repairs maps each repair's message id to the stuck state (the
	// time of the last progress) it repaired.
	repairs map[string]time.Time
	// crashes, when set, loses the commands of some stored changes: the
	// caller died between the store and them.
	crashes *rand.Rand
	// delivered: a step message for the run's position is on the
	// stream, which a worker will take. A running run without one is
	// stuck until a repair.
	delivered bool
	// committed holds the checkpoints whose commit was stored: a
	// redelivery of their step may meet them again (Follow).
	committed []checkpoint.Checkpoint
}

// TestModel applies generated sequences of events, from the callers of
// Apply (decisions, refusals, cancels) and from the rest of the world (a
// worker parking the run at an approval or moving it on, the run
// ending), and checks the invariants after each.
func TestModel(t *testing.T) {
	for seed := range uint64(sequences) {
		if err := runSequence(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func runSequence(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 26))
	w := &world{
		run: checkpoint.Run{ID: "r-" + fmt.Sprint(seed), Workflow: "claim", Status: checkpoint.StatusRunning,
			Step: 1, StepName: "s1", StartedBy: pick(rng, "ann", "bob", ""), Rev: 1,
			CreatedAt: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		published: map[string]string{},
		reminders: map[string]transition.Reminder{},
		now:       time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		crashes:   rand.New(rand.NewPCG(seed, 29)),
		repairs:   map[string]time.Time{},
		delivered: true,
	}
	// Some runs start near their bounds, so that sequences reach them.
	w.run.Refusals = pick(rng, 0, 0, transition.MaxRefusals-2, transition.MaxRefusals)
	for i := range pick(rng, 0, 0, transition.MaxSignalsPerRun-2) {
		w.run.Signals = append(w.run.Signals, checkpoint.Signal{Name: "go", ID: fmt.Sprint("p", i), By: "bot", At: w.now})
	}
	var trail []any // what happened, said only when an invariant breaks
	for range 5 + rng.IntN(30) {
		w.now = w.now.Add(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
		if rng.IntN(6) == 0 { // past the deadlines (an hour), or near one
			w.now = w.now.Add(pick(rng, time.Hour, time.Hour-time.Second, 2*time.Hour))
		}
		var err error
		if rng.IntN(3) == 0 {
			var said string
			said, err = w.outside(rng)
			trail = append(trail, said)
		} else {
			ev := event(rng, w.run)
			trail = append(trail, ev)
			err = w.apply(ev)
		}
		if err != nil {
			var said []string
			for _, e := range trail {
				if s, ok := e.(string); ok {
					said = append(said, s)
					continue
				}
				said = append(said, fmt.Sprintf("%T%+v", e, e))
			}
			return fmt.Errorf("%w\nafter %s", err, strings.Join(said, "\n  "))
		}
	}
	// Never silently stuck: a repair pass long after finds a running run
	// without its step message and publishes it.
	if w.run.Status == checkpoint.StatusRunning && !w.delivered {
		w.crashes = nil
		if err := w.apply(transition.Repair{Cutoff: w.now.Add(time.Hour)}); err != nil {
			return fmt.Errorf("the final repair: %w", err)
		}
		if !w.delivered {
			return fmt.Errorf("a running run (step %d) has no step message, and a repair publishes none: stuck for ever", w.run.Step)
		}
	}
	return nil
}

// outside changes the run as the rest of the world does (the worker, the
// scheduler), between events: the worker's events through Apply, with
// the invariants checked, its other changes as they are.
func (w *world) outside(rng *rand.Rand) (string, error) {
	if w.run.Status == checkpoint.StatusRunning && !w.delivered {
		return "nothing (its step message was lost: stuck until a repair)", nil
	}
	if len(w.committed) > 0 && rng.IntN(5) == 0 {
		// A redelivery of a committed step (its worker died after the
		// commit, or its ack was lost) meets the checkpoint again.
		cp := w.committed[len(w.committed)-1-rng.IntN(min(2, len(w.committed)))]
		ev := transition.Follow{Checkpoint: cp}
		return fmt.Sprintf("a redelivery of step %d meets its checkpoint: %T", cp.Step, ev), w.apply(ev)
	}
	said, ev, changed := worker(rng, &w.run, w.now, time.Hour)
	if ev != nil {
		return fmt.Sprintf("%s: %T%+v", said, ev, ev), w.apply(ev)
	}
	if changed {
		w.run.Rev++
		w.delivered = w.run.Status == checkpoint.StatusRunning // the worker published the next step
	}
	return said, nil
}

// The payloads a step asks approval for, and their hashes.
var (
	payloads = []string{`{"amount":10}`, `{"amount":20}`}
	hashes   = []string{sha256Hex(payloads[0]), sha256Hex(payloads[1])}
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// worker changes run as a worker's step does at now: parks it at an
// approval, waits for a signal, sleeps, moves on, starts children or
// ends it; waits last ttl. A park, a wait for a signal and a death are
// the worker's events, returned for the caller to apply; the rest it
// changes in run. Only a running step changes the run: a waiting or
// ended one is changed by events. It says what it did, and whether it
// changed run.
func worker(rng *rand.Rand, r *checkpoint.Run, now time.Time, ttl time.Duration) (string, transition.Event, bool) {
	if r.Status == checkpoint.StatusDead && r.FailedBranch > 0 && rng.IntN(2) == 0 {
		return "another delivery of the dead branch fails", transition.BranchDied{Mark: checkpoint.Checkpoint{RunID: r.ID, Step: r.Step,
			Branch: r.FailedBranch, Redrives: r.Redrives, Status: checkpoint.StatusDead, Error: r.Error}}, false
	}
	if r.Status != checkpoint.StatusRunning && rng.IntN(4) == 0 {
		// A delivery of a branch that read the run before it was
		// cancelled, parked or ended fails for good now.
		return "a late branch dies", transition.BranchDied{Mark: checkpoint.Checkpoint{RunID: r.ID, Step: r.Step,
			Branch: 1 + rng.IntN(3), Redrives: r.Redrives, Status: checkpoint.StatusDead, Error: "branch failed"}}, false
	}
	if r.Status.Terminal() {
		return "nothing (ended)", nil, false
	}
	if r.Status != checkpoint.StatusRunning {
		return "nothing (waiting)", nil, false
	}
	switch rng.IntN(5) {
	case 4:
		return "waits for a signal", transition.ParkForSignal{Step: r.Step, Name: pick(rng, "go", "stop"), TTL: ttl}, false
	case 0:
		return "parks at an approval", transition.ParkForApproval{Step: pick(rng, r.Step, r.Step, r.Step-1), Payload: []byte(pick(rng, payloads...)),
			Group: pick(rng, "adjusters", "finance"), OnExpiry: pick(rng, "", "reject", "escalate", "remind"),
			EscalateTo: pick(rng, "", "managers"), Reminders: pick(rng, 0, 1, 2), TTL: ttl}, false
	}
	// The step commits: its checkpoint, sometimes of an earlier
	// generation or step (a delivery that ran late).
	cp := checkpoint.Checkpoint{RunID: r.ID, Step: r.Step, Gen: r.Resumes, At: now, Next: fmt.Sprint("s", r.Step+1), Status: checkpoint.StatusRunning, Spend: 0.5}
	if rng.IntN(8) == 0 {
		cp.Gen, cp.Step = pick(rng, cp.Gen-1, cp.Gen), pick(rng, cp.Step, cp.Step-1)
	}
	if rng.IntN(2) == 0 { // the step read every pending signal
		for _, sig := range r.Signals {
			if sig.Pending() {
				cp.Signals = append(cp.Signals, sig.ID)
			}
		}
	}
	said := "moves on"
	switch rng.IntN(5) {
	case 0: // a step sleeps: the run waits at the step after it
		cp.Status, cp.WakeAt, said = checkpoint.StatusWaiting, now.Add(ttl), "sleeps"
	case 1: // the step started child runs: the next waits for them
		cp.Status, cp.Children, said = checkpoint.StatusWaiting, []checkpoint.Child{{ID: r.ID + "-c", Workflow: "w"}}, "starts children"
	case 2:
		cp.Status, cp.Next, said = pick(rng, checkpoint.StatusCompleted, checkpoint.StatusFailed), "", "ends"
	case 3:
		switch rng.IntN(4) {
		case 2: // a branch of the fan-out joined here commits; the store counted some
			return "a branch commits", transition.BranchCommitted{Step: pick(rng, r.Step, r.Step, r.Step-1), Count: pick(rng, 0, 1, 2), Of: 2}, false
		case 0:
			return "dies", transition.Die{Reason: "step failed 3 times"}, false
		case 1: // a branch of the fan-out joined here, sometimes of before a redrive
			return "a branch dies", transition.BranchDied{Mark: checkpoint.Checkpoint{RunID: r.ID, Step: pick(rng, r.Step, r.Step, r.Step-1),
				Branch: 1 + rng.IntN(3), Redrives: pick(rng, r.Redrives, r.Redrives, r.Redrives-1), Status: checkpoint.StatusDead, Error: "branch failed"}}, false
		}
	}
	return said, transition.Commit{Checkpoint: cp}, false
}

// event is a random event of the callers of Apply, often one that fits
// the run, often one that does not.
func event(rng *rand.Rand, run checkpoint.Run) transition.Event {
	switch rng.IntN(11) {
	case 9:
		return transition.ChildrenEnded{Count: 2}
	case 10:
		rd := transition.Redrive{By: "ops", Channel: "cli"}
		switch rng.IntN(4) {
		case 1:
			rd.Before = &checkpoint.Checkpoint{RunID: run.ID, Step: run.Step - 1, Children: []checkpoint.Child{{ID: "c1", Workflow: "w"}}}
		case 2:
			rd.Before = &checkpoint.Checkpoint{RunID: run.ID, Step: run.Step - 1, FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "b"}}}}
		case 3: // a stale read: another step's
			rd.Before = &checkpoint.Checkpoint{RunID: run.ID, Step: run.Step - 2, Children: []checkpoint.Child{{ID: "c1", Workflow: "w"}}}
		}
		return rd
	case 7:
		return transition.Expire{}
	case 8:
		if rng.IntN(2) == 0 {
			return transition.Expire{}
		}
		// The scheduler's repair pass; its cutoff is its stuck-after ago.
		return repairAt(rng, run)
	case 5, 6:
		return transition.Signal{Signal: checkpoint.Signal{Name: pick(rng, "go", "stop"), ID: pick(rng, "s1", "s2", "s3", "s4"),
			Data: pick(rng, []byte(nil), []byte(`{"n":1}`)), By: "bot", Channel: "api"}}
	case 0:
		return transition.Cancel{By: pick(rng, "ops", "ann"), Channel: "cli"}
	case 1:
		return transition.Refuse{Entry: checkpoint.AuditEntry{Step: run.Step, By: "bot"}}
	}
	d := transition.Decide{By: pick(rng, "ann", "bob", "carl"), Channel: "api", Reject: rng.IntN(3) == 0}
	step := run.Step
	if run.Wait != nil {
		step = run.Wait.Step
	}
	d.Step = pick(rng, 0, step, step+1)
	d.PayloadSHA256 = pick(rng, "", hashes[0], hashes[1])
	d.Groups = pick(rng, nil, []string{"adjusters"}, []string{"finance", "adjusters"}, []string{"finance"})
	d.FourEyes = rng.IntN(2) == 0
	return d
}

func pick[T any](rng *rand.Rand, v ...T) T { return v[rng.IntN(len(v))] }

// repairAt is a repair of run as the scheduler makes it: its cutoff
// before or after the run's last change, sometimes a sign of life since.
func repairAt(rng *rand.Rand, run checkpoint.Run) transition.Repair {
	e := transition.Repair{Cutoff: run.UpdatedAt.Add(pick(rng, -time.Minute, time.Minute, time.Hour))}
	if rng.IntN(3) == 0 {
		e.Progress = run.UpdatedAt.Add(30 * time.Second)
	}
	return e
}

// redriven says whether ev redrives old: a Redrive of a dead run.
func redriven(old checkpoint.Run, ev transition.Event) bool {
	_, ok := ev.(transition.Redrive)
	return ok && old.Status == checkpoint.StatusDead
}

// startedChildren says whether the Redrive ev knows that the step before
// old's cursor started child runs.
func startedChildren(old checkpoint.Run, ev transition.Event) bool {
	b := ev.(transition.Redrive).Before
	return b != nil && b.Step == old.Step-1 && len(b.Children) > 0
}

// has says whether cmds hold a command of type C.
func has[C transition.Command](cmds []transition.Command) bool {
	for _, c := range cmds {
		if _, ok := c.(C); ok {
			return true
		}
	}
	return false
}

// apply applies ev, checks the invariants, and stores the result as a
// store would (the revision moves).
func (w *world) apply(ev transition.Event) error {
	before, snapshot := w.run, encode(w.run)
	r := transition.Apply(w.run, ev, w.now)
	if encode(w.run) != snapshot {
		return errors.New("Apply changed the run it was given")
	}
	if r.Store && (shares(r.Run.Audit, before.Audit) || shares(r.Run.Approvals, before.Approvals) || shares(r.Run.Signals, before.Signals)) {
		return errors.New("the result shares a slice with the run read: a retry after a conflict would write into it")
	}
	if again := transition.Apply(w.run, ev, w.now); !same(r, again) {
		return fmt.Errorf("Apply is not a function of its input: %v, then %v", r, again)
	}
	if err := w.check(before, ev, r); err != nil {
		return err
	}
	if err := w.checkExpiry(before, ev, r); err != nil {
		return err
	}
	if err := w.checkRepair(before, ev, r); err != nil {
		return err
	}
	lost := r.Store && w.crashes != nil && w.crashes.IntN(10) == 0
	if r.Store {
		// A commit's next step is published by the worker that
		// committed, or by the redelivery of its step if it died.
		w.delivered = isCommit(ev) && r.Run.Status == checkpoint.StatusRunning
		if isCommit(ev) {
			w.committed = append(w.committed, ev.(transition.Commit).Checkpoint)
		}
	}
	for _, c := range r.Commands {
		switch p := c.(type) {
		case transition.PublishStep:
			if err := w.publish(p, r); err != nil {
				return err
			}
			w.delivered = w.delivered || !lost
		case transition.PublishFanOut:
			w.delivered = w.delivered || !lost
		case transition.PublishJoin:
			b, ok := ev.(transition.BranchCommitted)
			if !ok || b.Count != b.Of || before.Status != checkpoint.StatusRunning || before.Step != b.Step {
				return fmt.Errorf("a join published by %T%+v on a %s run at step %d", ev, ev, before.Status, before.Step)
			}
			step := fmt.Sprintf("step %d %s, generation %d", before.Step, before.StepName, before.Resumes+before.Redrives)
			if prev, seen := w.published[p.MsgID]; seen && prev != step {
				return fmt.Errorf("join id %s presented for %s and for %s", p.MsgID, prev, step)
			}
			w.published[p.MsgID] = step
			w.delivered = true
		case transition.PublishReminder:
			if prev, seen := w.reminders[p.MsgID]; seen && prev != p.Reminder {
				return fmt.Errorf("reminder id %s sent for %+v and for %+v", p.MsgID, prev, p.Reminder)
			}
			w.reminders[p.MsgID] = p.Reminder
		}
	}
	if r.Store {
		w.run = r.Run
		w.run.Rev++
		// A store's slices may have room to grow: an event that
		// appended in place would write into the caller's copy.
		w.run.Audit = slices.Grow(w.run.Audit, 2)
		w.run.Approvals = slices.Grow(w.run.Approvals, 2)
		w.run.Signals = slices.Grow(w.run.Signals, 2)
	}
	return nil
}

// check holds the invariants of one applied event.
func (w *world) check(old checkpoint.Run, ev transition.Event, r transition.Result) error {
	next := r.Run
	switch {
	case r.Err != nil && (r.Store || !reflect.DeepEqual(next, old)):
		return fmt.Errorf("a refusal (%v) changed the run", r.Err)
	case r.Err == nil && !r.Store && !isFull(old, ev):
		return errors.New("an event neither refused nor stored")
	case !r.Store && !reflect.DeepEqual(next, old):
		return errors.New("an event that stores nothing changed the run it returns")
	case !r.Store:
		return nil
	case pending(next.Signals) > transition.MaxSignalsPerRun:
		return fmt.Errorf("%d signals pending", pending(next.Signals))
	case old.Status.Terminal() && next.Status != old.Status && !redriven(old, ev):
		return fmt.Errorf("an ended run (%s) became %s", old.Status, next.Status)
	case redriven(old, ev) != (next.Redrives == old.Redrives+1) || (!redriven(old, ev) && next.Redrives != old.Redrives):
		return fmt.Errorf("redrives went from %d to %d on a %T of a %s run", old.Redrives, next.Redrives, ev, old.Status)
	case next.Step < old.Step:
		return fmt.Errorf("the cursor went back from step %d to %d", old.Step, next.Step)
	case isCommit(ev) && !(next.Steps == old.Steps+1 && (next.Step == old.Step+1 || next.Status.Terminal() && next.Step == old.Step)):
		return fmt.Errorf("a commit moved the cursor from %d to %d (%s), the count from %d to %d", old.Step, next.Step, next.Status, old.Steps, next.Steps)
	case isCommit(ev) && pendingAmong(next.Signals, ev.(transition.Commit).Checkpoint.Signals):
		return errors.New("a signal the committed step read is still pending")
	case isCommit(ev) && (old.Status != checkpoint.StatusRunning || ev.(transition.Commit).Checkpoint.Gen != old.Resumes):
		return fmt.Errorf("a checkpoint of generation %d committed on a %s run of generation %d", ev.(transition.Commit).Checkpoint.Gen, old.Status, old.Resumes)
	case redriven(old, ev) && next.Resumes != old.Resumes:
		return errors.New("a redrive moved the resumes")
	case redriven(old, ev) && startedChildren(old, ev) != (next.Status == checkpoint.StatusWaiting):
		return fmt.Errorf("a redrive after the step before started children: %t; the run is %s", startedChildren(old, ev), next.Status)
	case next.Status == checkpoint.StatusWaiting && next.Wait.Kind != checkpoint.WaitChildren && next.Wait.Deadline.IsZero():
		return fmt.Errorf("a %s wait without a deadline: nothing will end it", next.Wait.Kind)
	case next.Status == checkpoint.StatusWaiting && next.Wait.Kind != checkpoint.WaitChildren && old.Status != checkpoint.StatusWaiting &&
		!slices.Contains(r.Commands, transition.Command(transition.IndexDue{At: next.Wait.Deadline})):
		return fmt.Errorf("a new %s wait whose deadline is not indexed: %v", next.Wait.Kind, r.Commands)
	case next.Status == checkpoint.StatusWaiting && next.Wait.Kind == checkpoint.WaitSignal && pendingOf(next.Signals, next.Wait.Name) != "":
		return fmt.Errorf("waits for signal %s while %s of that name is pending: stuck, or a stale expiry read as new", next.Wait.Name, pendingOf(next.Signals, next.Wait.Name))
	case next.Status == checkpoint.StatusWaiting && old.Status == checkpoint.StatusRunning && next.Wait.Step != next.Step:
		return fmt.Errorf("a wait at step %d of a run at step %d", next.Wait.Step, next.Step)
	case next.Status == checkpoint.StatusWaiting && old.Status == checkpoint.StatusRunning && !isCommit(ev) && next.Wait.Step != old.Step:
		return fmt.Errorf("a wait at step %d of a run running step %d", next.Wait.Step, old.Step)
	case isBranchDeath(ev) && (old.Status != checkpoint.StatusRunning || old.Redrives != ev.(transition.BranchDied).Mark.Redrives || next.FailedBranch != ev.(transition.BranchDied).Mark.Branch):
		return fmt.Errorf("a branch death of redrive %d on a %s run after %d redrives, failed branch %d", ev.(transition.BranchDied).Mark.Redrives, old.Status, old.Redrives, next.FailedBranch)
	case next.Status == checkpoint.StatusDead && old.Status != checkpoint.StatusDead &&
		(!has[transition.DeadLetter](r.Commands) || !has[transition.NotifyParent](r.Commands)):
		return fmt.Errorf("a death without its dead letter or the parent's notice: %v", r.Commands)
	case next.Status == checkpoint.StatusWaiting && next.Wait.Kind == checkpoint.WaitChildren && old.Status != checkpoint.StatusWaiting && !has[transition.StartChildren](r.Commands):
		return errors.New("a run waits for children nobody starts")
	case next.Status == checkpoint.StatusRunning && old.Status != checkpoint.StatusRunning && !publishes(r.Commands, false) && !has[transition.PublishFanOut](r.Commands):
		return fmt.Errorf("a %s run set running with nothing published: stuck", old.Status)
	case next.Status != checkpoint.StatusWaiting && next.Wait != nil:
		return fmt.Errorf("a %s run keeps a wait", next.Status)
	case next.Status == checkpoint.StatusWaiting && next.Wait == nil:
		return errors.New("a waiting run without a wait")
	case old.Status.Terminal() && old.Status != checkpoint.StatusDead && len(next.Signals) > len(old.Signals):
		return fmt.Errorf("a %s run took a signal (only a dead one keeps them, for a redrive)", old.Status)
	case heldTwice(next.Signals) != "":
		return fmt.Errorf("signal id %s held twice", heldTwice(next.Signals))
	case next.Refusals > transition.MaxRefusals:
		return fmt.Errorf("%d refusals kept", next.Refusals)
	}
	resumed := old.Status == checkpoint.StatusWaiting && next.Status == checkpoint.StatusRunning
	// A timer's wake and the children's resume keep the generation:
	// each is once per sleep or start of children, and their ids have
	// a cause of their own.
	woke := resumed && (old.Wait.Kind == checkpoint.WaitTimer || old.Wait.Kind == checkpoint.WaitChildren)
	switch {
	case woke && (next.Resumes != old.Resumes || next.Step != old.Wait.Step):
		return fmt.Errorf("a timer's wake moved the generation from %d to %d, the step from %d to %d", old.Resumes, next.Resumes, old.Step, next.Step)
	case resumed && !woke && next.Resumes != old.Resumes+1:
		return fmt.Errorf("a resume moved the generation from %d to %d", old.Resumes, next.Resumes)
	case !resumed && next.Resumes != old.Resumes:
		return errors.New("the generation moved without a resume")
	case resumed != r.Resumed:
		return fmt.Errorf("Resumed says %t of a run that went from %s to %s", r.Resumed, old.Status, next.Status)
	case resumed && !resumedBy(old, next, ev):
		return fmt.Errorf("a resume without what it waited for (%s)", old.Wait.Kind)
	case resumed && !publishes(r.Commands, false):
		return errors.New("a run resumed with no step published: stuck")
	case next.Status == checkpoint.StatusCancelled && old.Status != checkpoint.StatusCancelled && len(r.Commands) != 3:
		return fmt.Errorf("a cancel's commands: %v", r.Commands)
	}
	return nil
}

// pending counts the signals no step consumed yet (expiry markers aside).
func pending(signals []checkpoint.Signal) int {
	n := 0
	for _, s := range signals {
		if s.Pending() && !s.Expired {
			n++
		}
	}
	return n
}

func isBranchDeath(ev transition.Event) bool {
	_, ok := ev.(transition.BranchDied)
	return ok
}

func isCommit(ev transition.Event) bool {
	_, ok := ev.(transition.Commit)
	return ok
}

// pendingAmong says whether a signal of ids is pending.
func pendingAmong(signals []checkpoint.Signal, ids []string) bool {
	for _, s := range signals {
		if s.Pending() && slices.Contains(ids, s.ID) {
			return true
		}
	}
	return false
}

// pendingOf is the id of a pending signal or expiry marker of name, if
// any.
func pendingOf(signals []checkpoint.Signal, name string) string {
	for _, s := range signals {
		if s.Pending() && s.Name == name {
			return s.ID
		}
	}
	return ""
}

// heldTwice is an id two signals of the run hold, if any (expiry
// markers aside).
func heldTwice(signals []checkpoint.Signal) string {
	seen := map[string]bool{}
	for _, s := range signals {
		if s.Expired {
			continue
		}
		if seen[s.ID] {
			return s.ID
		}
		seen[s.ID] = true
	}
	return ""
}

// resumedBy says whether the resume of old into next brought what old
// waited for: a decision on the parked step, or a pending signal of the
// awaited name.
func resumedBy(old, next checkpoint.Run, ev transition.Event) bool {
	switch ev.(type) {
	case transition.Decide:
		return old.Wait.IsApproval() && len(next.Approvals) == len(old.Approvals)+1 && next.Approvals[len(old.Approvals)].Step == old.Wait.Step
	case transition.Signal:
		last := next.Signals[len(next.Signals)-1]
		return old.Wait.Kind == checkpoint.WaitSignal && len(next.Signals) == len(old.Signals)+1 && last.Name == old.Wait.Name && last.Pending()
	case transition.ChildrenEnded:
		return old.Wait.Kind == checkpoint.WaitChildren
	case transition.Expire:
		switch old.Wait.Kind {
		case checkpoint.WaitTimer:
			return true
		case checkpoint.WaitSignal:
			last := next.Signals[len(next.Signals)-1]
			return last.Expired && last.Name == old.Wait.Name && last.Pending()
		}
		last := next.Approvals[len(next.Approvals)-1]
		return len(next.Approvals) == len(old.Approvals)+1 && last.Step == old.Wait.Step && last.Decision == checkpoint.DecisionRejected
	}
	return false
}

// checkRepair holds the invariants of the scheduler's repair (issue 23,
// item 4): it publishes only for a running run that made no progress
// since the cutoff, and one stuck state has one id, which no other stuck
// state shares.
func (w *world) checkRepair(old checkpoint.Run, ev transition.Event, r transition.Result) error {
	e, ok := ev.(transition.Repair)
	if !ok {
		return nil
	}
	progress := old.UpdatedAt
	if e.Progress.After(progress) {
		progress = e.Progress
	}
	stuck := old.Status == checkpoint.StatusRunning && !progress.After(e.Cutoff)
	for _, c := range r.Commands {
		p, ok := c.(transition.PublishStep)
		switch {
		case !stuck:
			return fmt.Errorf("a repair of a %s run with progress at %s, after its cutoff %s: a live step run twice", old.Status, progress, e.Cutoff)
		case !ok || !p.Repair:
			return fmt.Errorf("a repair publishes %T%+v", c, c)
		}
		if prev, seen := w.repairs[p.MsgID]; seen && !prev.Equal(progress) {
			return fmt.Errorf("repair id %s for the stuck states of %s and of %s: the second is dropped as a duplicate", p.MsgID, prev, progress)
		}
		w.repairs[p.MsgID] = progress
	}
	if stuck && len(r.Commands) == 0 {
		return errors.New("a stuck run not repaired")
	}
	return nil
}

// checkExpiry holds the invariants of the scheduler's expiry: it acts
// only on a wait whose deadline passed, and a wait it keeps (escalated,
// reminded) is due again later, at the time it reports for the index.
func (w *world) checkExpiry(old checkpoint.Run, ev transition.Event, r transition.Result) error {
	_, isExpire := ev.(transition.Expire)
	next := r.Run
	switch {
	case !isExpire && r.Expiry != (transition.Expiry{}):
		return fmt.Errorf("a %T reports an expiry", ev)
	case !isExpire:
		return nil
	case r.Err != nil:
		return fmt.Errorf("an expiry refused: %v", r.Err)
	case r.Store && (old.Wait == nil || w.now.Before(old.Wait.Deadline)):
		return errors.New("an expiry changed a run whose wait was not due")
	case !r.Store && old.Status == checkpoint.StatusWaiting && old.Wait != nil && old.Wait.Kind != checkpoint.WaitChildren && !w.now.Before(old.Wait.Deadline):
		return errors.New("a due wait was not expired: stuck")
	case r.Store && next.Status == checkpoint.StatusWaiting &&
		(!next.Wait.Deadline.After(w.now) || !r.Expiry.Next.Equal(next.Wait.Deadline)):
		return fmt.Errorf("a kept wait is due at %s, the index is told %s (now %s)", next.Wait.Deadline, r.Expiry.Next, w.now)
	case r.Store && next.Status == checkpoint.StatusWaiting && next.Wait.Reminders > old.Wait.Reminders:
		return errors.New("an expiry added reminders")
	case r.Store && next.Status == checkpoint.StatusWaiting && next.Wait.Reminders < 0:
		return fmt.Errorf("%d reminders left", next.Wait.Reminders)
	case r.Expiry.Action == "":
		return errors.New("an expiry without an action")
	}
	return nil
}

// isFull: a refusal recorded past MaxRefusals, a signal the run holds
// already, an expiry with nothing due and the end of children nobody
// waits for change nothing, and are no error.
func isFull(old checkpoint.Run, ev transition.Event) bool {
	switch e := ev.(type) {
	case transition.Refuse:
		return old.Refusals >= transition.MaxRefusals
	case transition.Expire: // nothing due (checkExpiry says when that is wrong)
		return true
	case transition.Repair, transition.BranchCommitted, transition.Follow: // never store
		return true
	case transition.BranchDied: // the dead letter of a run this branch killed, again
		return old.Status == checkpoint.StatusDead && old.FailedBranch == e.Mark.Branch
	case transition.ChildrenEnded: // not waiting for children
		return old.Status != checkpoint.StatusWaiting || old.Wait.Kind != checkpoint.WaitChildren
	case transition.Signal:
		_, same, ok := transition.Delivered(old, e.Signal.ID, e.Signal.Name, e.Signal.Data)
		return ok && same
	}
	return false
}

// publish checks a step message against what was published before: an
// id is never presented for another step, and a best-effort republish
// sends an id a stored change sent before (it owes, it does not mint).
func (w *world) publish(p transition.PublishStep, r transition.Result) error {
	// An id names one publish: one step, in one generation.
	step := fmt.Sprintf("step %d %s, generation %d", r.Run.Step, r.Run.StepName, r.Run.Resumes+r.Run.Redrives)
	prev, seen := w.published[p.MsgID]
	switch {
	case seen && prev != step:
		return fmt.Errorf("message id %s presented for step %s and for %s", p.MsgID, prev, step)
	case p.Again && !seen:
		return fmt.Errorf("a republish minted a new id %s", p.MsgID)
	case p.Again && prev != step:
		return fmt.Errorf("a republish of %s, minted for %s, of a run at %s: a step of a past generation presented again", p.MsgID, prev, step)
	case !p.Again && !p.Repair && seen:
		return fmt.Errorf("message id %s minted twice: a resume of one generation published twice as new", p.MsgID)
	case p.Repair && r.Store:
		return errors.New("a repair that stores")
	case p.BestEffort && !p.Again:
		return fmt.Errorf("a new step message %s whose loss is not reported: the run would be stuck", p.MsgID)
	case !p.Again && !p.Repair && !r.Store:
		return errors.New("a step published as new for a change not stored")
	}
	w.published[p.MsgID] = step
	return nil
}

// same says whether two results of one event are the same.
func same(a, b transition.Result) bool {
	return a.Store == b.Store && fmt.Sprint(a.Err) == fmt.Sprint(b.Err) &&
		reflect.DeepEqual(a.Run, b.Run) && reflect.DeepEqual(a.Commands, b.Commands)
}

func publishes(cmds []transition.Command, again bool) bool {
	for _, c := range cmds {
		if p, ok := c.(transition.PublishStep); ok && p.Again == again {
			return true
		}
	}
	return false
}

func encode(run checkpoint.Run) string {
	b, err := json.Marshal(run)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// shares says whether a grew into b's backing array (an unchanged slice
// may be shared: nothing writes into it).
func shares[T any](a, b []T) bool {
	return len(a) != len(b) && cap(a) > 0 && cap(b) > 0 && &a[:cap(a)][cap(a)-1] == &b[:cap(b)][cap(b)-1]
}
