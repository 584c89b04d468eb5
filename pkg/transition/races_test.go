package transition_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/transition"
)

// The interleavings of issue 23 ("Races at the edges") that run through
// this package, each a named sequence through the model's world: every
// event is checked against the model's invariants (world.apply), and
// each sequence asserts what the issue found broken.
func TestRaces(t *testing.T) {
	t.Run("23.1 signal room after many expiries and signals", func(t *testing.T) {
		w := script(t)
		// A step waits for go, the wait expires, the step reads the
		// marker and waits again, 150 times; then go comes 150 times.
		for range 150 {
			w.waitSignal("go")
			w.now = w.now.Add(2 * time.Hour)
			if r := w.must(transition.Expire{}); r.Expiry.Action != transition.ExpireSignal {
				t.Fatalf("expiry did %q", r.Expiry.Action)
			}
			w.consume()
		}
		// Expired twice with no step reading the first marker: one
		// marker stays, and markers take no room from signals.
		for range 2 {
			w.waitSignal("go")
			w.now = w.now.Add(2 * time.Hour)
			w.must(transition.Expire{})
		}
		markers := 0
		for _, sig := range w.run.Signals {
			if sig.Expired {
				markers++
			}
		}
		if markers != 1 {
			t.Fatalf("%d expiry markers for one name", markers)
		}
		for i := range transition.MaxSignalsPerRun {
			w.must(transition.Signal{Signal: checkpoint.Signal{Name: "other", ID: fmt.Sprint("o-", i), By: "bot"}})
		}
		w.consume()
		for i := range 150 {
			w.waitSignal("go")
			if r := w.must(transition.Signal{Signal: checkpoint.Signal{Name: "go", ID: fmt.Sprint("go-", i), By: "bot"}}); !r.Resumed {
				t.Fatalf("signal %d did not resume the run", i)
			}
			w.consume()
		}
	})
	t.Run("23.2 a stale expiry marker and a later wait for the same name", func(t *testing.T) {
		w := script(t)
		// Step 1 waits for go; the wait expires (a marker, the step runs
		// again); the real go comes before a worker runs it.
		w.waitSignal("go")
		w.now = w.now.Add(2 * time.Hour)
		w.must(transition.Expire{})
		if r := w.must(transition.Signal{Signal: checkpoint.Signal{Name: "go", ID: "g1", By: "bot"}}); r.Resumed {
			t.Fatal("a signal to a running run resumed it")
		}
		// Step 1 runs again and reads go: pkg/steps lists the real signal
		// and the markers of the name it read (worker.TestStaleExpiryMarkerDoesNotFailLaterWait
		// holds that half on both stores), and the commit takes both away.
		var read []string
		for _, sig := range w.run.Signals {
			if sig.Name == "go" {
				read = append(read, sig.ID)
			}
		}
		if len(read) != 2 {
			t.Fatalf("pending before the commit: %+v, want the marker and g1", w.run.Signals)
		}
		w.must(transition.Commit{Checkpoint: checkpoint.Checkpoint{RunID: w.run.ID, Step: 1, Gen: w.run.Resumes, At: w.now,
			Next: "s2", Status: checkpoint.StatusRunning, Signals: read}})
		// Step 2 waits for go: nothing stale is pending, so it waits, and
		// the next go resumes it.
		if len(w.run.Signals) != 0 {
			t.Fatalf("pending after the commit: %+v", w.run.Signals)
		}
		w.waitSignal("go")
		if r := w.must(transition.Signal{Signal: checkpoint.Signal{Name: "go", ID: "g2", By: "bot"}}); !r.Resumed {
			t.Fatal("the next go did not resume step 2")
		}
	})
	t.Run("23.4 a repair of a step that is alive, and of one stuck state twice", func(t *testing.T) {
		w := script(t)
		w.moveOn()
		w.now = w.now.Add(9 * time.Minute) // the step runs for 9 minutes
		cutoff := w.now.Add(-5 * time.Minute)
		// Its worker's heartbeat marked it alive a minute ago: progress.
		alive := transition.Repair{Cutoff: cutoff, Progress: w.now.Add(-time.Minute)}
		if r := transition.Apply(w.run, alive, w.now); len(r.Commands) != 0 || r.Store {
			t.Fatalf("a repair of a step alive a minute ago: %v", r.Commands)
		}
		// No heartbeat: stuck. Two schedulers (or two passes) repair the
		// same stuck state under one id, which the stream drops.
		stuck := transition.Repair{Cutoff: cutoff}
		var ids []string
		for range 2 {
			r := transition.Apply(w.run, stuck, w.now)
			if err := w.apply(stuck); err != nil {
				t.Fatal(err)
			}
			if len(r.Commands) != 1 || !r.Commands[0].(transition.PublishStep).Repair || r.Store {
				t.Fatalf("a repair of a stuck step: %v, stored %t", r.Commands, r.Store)
			}
			ids = append(ids, r.Commands[0].(transition.PublishStep).MsgID)
		}
		if ids[0] != ids[1] {
			t.Fatalf("one stuck state repaired under two ids: %q", ids)
		}
		// The repair's own mark is progress (scheduler.Repair writes it):
		// stuck again after as long again, it is a new state and a new id.
		later := transition.Repair{Cutoff: w.now.Add(time.Minute), Progress: w.now}
		w.now = w.now.Add(6 * time.Minute)
		r := transition.Apply(w.run, later, w.now)
		if len(r.Commands) != 1 || r.Commands[0].(transition.PublishStep).MsgID == ids[0] {
			t.Fatalf("the next stuck state: %v, want a publish under a new id", r.Commands)
		}
	})
	t.Run("23.3 children resume, dead step, redrive within the duplicate window", func(t *testing.T) {
		w := script(t)
		w.moveOn()
		cp := checkpoint.Checkpoint{RunID: w.run.ID, Step: w.run.Step, Children: []checkpoint.Child{{ID: "c1", Workflow: "w"}}}
		w.startChildren()
		first := w.must(transition.ChildrenEnded{Count: 1}).Commands
		w.die()
		if r := w.must(transition.Redrive{By: "ops", Before: &cp}); r.Run.Status != checkpoint.StatusWaiting || !has[transition.StartChildren](r.Commands) {
			t.Fatalf("redrive of a parent: %s, %v", r.Run.Status, r.Commands)
		}
		// The second resume is a new message (world.publish refuses an id
		// minted twice): the stream would drop a repeat of the first.
		second := w.must(transition.ChildrenEnded{Count: 1}).Commands
		if fmt.Sprint(first) == fmt.Sprint(second) {
			t.Fatalf("both resumes are %v", first)
		}
	})
	t.Run("23.3 a timer's wake after a redrive", func(t *testing.T) {
		w := script(t)
		w.sleep()
		w.now = w.now.Add(2 * time.Hour)
		w.must(transition.Expire{})
		w.die()
		w.must(transition.Redrive{By: "ops"})
		w.sleep()
		w.now = w.now.Add(2 * time.Hour)
		w.must(transition.Expire{})
	})
	t.Run("23.5 a branch's death after its join committed, and after a redrive", func(t *testing.T) {
		w := script(t)
		// Step 1 fans out; the run waits at the join, step 2.
		w.must(transition.Commit{Checkpoint: checkpoint.Checkpoint{RunID: w.run.ID, Step: 1, Gen: w.run.Resumes, At: w.now, Next: "join",
			Status: checkpoint.StatusRunning, FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "b"}, {Step: "b"}}}}})
		mark := checkpoint.Checkpoint{RunID: w.run.ID, Step: 2, Branch: 1, Status: checkpoint.StatusDead, Error: "branch failed", Redrives: w.run.Redrives}
		// Another delivery of branch 1 committed, the join ran and
		// committed: the run is past the fan-out. The failure that lost
		// the branch's key arrives late and must change nothing.
		w.must(transition.Commit{Checkpoint: checkpoint.Checkpoint{RunID: w.run.ID, Step: 2, Gen: w.run.Resumes, At: w.now, Next: "pay", Status: checkpoint.StatusRunning}})
		if r := transition.Apply(w.run, transition.BranchDied{Mark: mark}, w.now); r.Err == nil || r.Store {
			t.Fatalf("a branch death after the join: %v, stored %t", r.Err, r.Store)
		}
		// A branch that killed the run, a redrive, and a late copy of the
		// first failure: the redriven run keeps running.
		w2 := script(t)
		w2.must(transition.Commit{Checkpoint: checkpoint.Checkpoint{RunID: w2.run.ID, Step: 1, Gen: 0, At: w2.now, Next: "join",
			Status: checkpoint.StatusRunning, FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "b"}}}}})
		first := checkpoint.Checkpoint{RunID: w2.run.ID, Step: 2, Branch: 1, Status: checkpoint.StatusDead, Error: "branch failed"}
		w2.must(transition.BranchDied{Mark: first})
		fan := checkpoint.Checkpoint{RunID: w2.run.ID, Step: 1, FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "b"}}}}
		if r := w2.must(transition.Redrive{By: "ops", Before: &fan}); !has[transition.PublishFanOut](r.Commands) {
			t.Fatalf("a redrive at a join publishes %v", r.Commands)
		}
		if r := transition.Apply(w2.run, transition.BranchDied{Mark: first}, w2.now); r.Err == nil || r.Store {
			t.Fatalf("a branch death of before the redrive: %v, stored %t", r.Err, r.Store)
		}
	})
	t.Run("23.3 the join after a redrive within the duplicate window", func(t *testing.T) {
		w := script(t)
		fan := checkpoint.Checkpoint{RunID: w.run.ID, Step: 1, Gen: 0, At: w.now, Next: "join",
			Status: checkpoint.StatusRunning, FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "b"}, {Step: "b"}}}}
		w.must(transition.Commit{Checkpoint: fan})
		join := func() string {
			t.Helper()
			ev := transition.BranchCommitted{Step: 2, Count: 2, Of: 2}
			r := transition.Apply(w.run, ev, w.now)
			if err := w.apply(ev); err != nil { // world.apply refuses an id presented for two generations
				t.Fatal(err)
			}
			if len(r.Commands) != 1 {
				t.Fatalf("every branch in: %v", r.Commands)
			}
			return r.Commands[0].(transition.PublishJoin).MsgID
		}
		first := join()
		w.die() // the join dies
		w.must(transition.Redrive{By: "ops", Before: &fan})
		// A replayed branch counts every branch in again: its join is
		// the redriven run's, not a duplicate the stream would drop.
		if second := join(); second == first {
			t.Fatalf("both joins are %s", first)
		}
	})
	t.Run("a late redelivery of a committed step (model seeds 117, 8887)", func(t *testing.T) {
		var w *scripted
		// After the commit the run went on by other means (its children
		// ended, its timer woke it, it died and was redriven): the late
		// delivery of the step meets its checkpoint and owes no step
		// message. One under the regular id, which nobody minted, would
		// run the next step a second time beside the one the resume
		// published (worker.TestLateRedeliveryAfterChildrenRunsTheNextStepOnce).
		for _, after := range []string{"children", "timer", "redrive"} {
			w = script(t)
			cp := checkpoint.Checkpoint{RunID: w.run.ID, Step: 1, Next: "s2", Status: checkpoint.StatusRunning, At: w.now}
			switch after {
			case "children":
				cp.Status, cp.Children = checkpoint.StatusWaiting, []checkpoint.Child{{ID: "c1", Workflow: "w"}}
				w.must(transition.Commit{Checkpoint: cp})
				w.must(transition.ChildrenEnded{Count: 1})
			case "timer":
				cp.Status, cp.WakeAt = checkpoint.StatusWaiting, w.now.Add(time.Hour)
				w.must(transition.Commit{Checkpoint: cp})
				w.now = w.now.Add(2 * time.Hour)
				w.must(transition.Expire{})
			case "redrive":
				w.must(transition.Commit{Checkpoint: cp})
				w.must(transition.Die{Reason: "step 2 failed 3 times"})
				w.must(transition.Redrive{By: "ops", Before: &cp})
			}
			if w.run.Status != checkpoint.StatusRunning || w.run.Step != 2 {
				t.Fatalf("after %s: the run is %s at step %d, want running at 2", after, w.run.Status, w.run.Step)
			}
			if r := transition.Apply(w.run, transition.Follow{Checkpoint: cp}, w.now); len(r.Commands) != 0 {
				t.Fatalf("after %s: the late delivery owes %v, want nothing", after, r.Commands)
			}
		}
		// A commit that lands after a redrive of the run at the step it
		// committed: the KV store's settle carries a commit that lost its
		// compare-and-set onto the run as it is now, and a worker rolls a
		// lagging record forward over a checkpoint written before the
		// redrive. The run moved on by this commit alone, after the
		// redrive: the commit owes the next step (review of 95014eb,
		// which compared the checkpoint's redrives and owed nothing).
		w = script(t)
		late := checkpoint.Checkpoint{RunID: w.run.ID, Step: 1, Next: "s2", Status: checkpoint.StatusRunning, At: w.now}
		w.must(transition.Die{Reason: "step 1 failed 3 times"})
		w.must(transition.Redrive{By: "ops"})
		w.must(transition.Commit{Checkpoint: late})
		if r := transition.Apply(w.run, transition.Follow{Checkpoint: late}, w.now); len(r.Commands) != 1 || !has[transition.PublishStep](r.Commands) {
			t.Fatalf("a commit that landed after a redrive owes %v, want the next step", r.Commands)
		}
		// Its commit's own publish lost: the redelivery owes it, under
		// the id the commit minted (world.publish checks Again).
		w = script(t)
		cp := checkpoint.Checkpoint{RunID: w.run.ID, Step: 1, Next: "s2", Status: checkpoint.StatusRunning, At: w.now}
		minted := w.must(transition.Commit{Checkpoint: cp}).Commands
		if err := w.apply(transition.Follow{Checkpoint: cp}); err != nil {
			t.Fatal(err)
		}
		owed := transition.Apply(w.run, transition.Follow{Checkpoint: cp}, w.now).Commands
		if len(minted) != 1 || len(owed) != 1 || minted[0].(transition.PublishStep).MsgID != owed[0].(transition.PublishStep).MsgID || !owed[0].(transition.PublishStep).Again {
			t.Fatalf("the commit published %v, its redelivery %v: want the same id, again", minted, owed)
		}
	})
	t.Run("a late decision after a signal resumed the step (model seed 98)", func(t *testing.T) {
		w := script(t)
		w.park()
		w.must(transition.Decide{By: "ann"})
		w.waitSignal("go")
		w.must(transition.Signal{Signal: checkpoint.Signal{Name: "go", ID: "g1", By: "bot"}})
		// The same decision again, as a retried request: refused, and
		// it publishes nothing new (world.publish refuses a republish of
		// an id that is not the newest).
		if r := transition.Apply(w.run, transition.Decide{By: "ann"}, w.now); r.Err == nil || len(r.Commands) != 0 {
			t.Fatalf("late decision: %v, %v", r.Err, r.Commands)
		}
	})
}

// script is a world for a named sequence: a run at its first step.
func script(t *testing.T) *scripted {
	t.Helper()
	return &scripted{t: t, world: &world{
		run:       checkpoint.Run{ID: "r-" + t.Name(), Workflow: "claim", Status: checkpoint.StatusRunning, Step: 1, StepName: "s1", Rev: 1},
		published: map[string]string{},
		reminders: map[string]transition.Reminder{},
		now:       time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		delivered: true,
		repairs:   map[string]time.Time{},
	}}
}

type scripted struct {
	t *testing.T
	*world
}

// must applies ev, which must pass the invariants, be accepted and store
// a change.
func (s *scripted) must(ev transition.Event) transition.Result {
	s.t.Helper()
	s.now = s.now.Add(time.Second)
	r := transition.Apply(s.run, ev, s.now)
	if err := s.apply(ev); err != nil {
		s.t.Fatalf("%T: %v", ev, err)
	}
	if r.Err != nil || !r.Store {
		s.t.Fatalf("%T refused (%v) or stored nothing", ev, r.Err)
	}
	return r
}

// The worker's changes, as the random world makes them.
func (s *scripted) worker(change func(r *checkpoint.Run)) {
	s.now = s.now.Add(time.Second)
	s.run.Rev++
	s.run.UpdatedAt = s.now
	change(&s.run)
	s.delivered = s.run.Status == checkpoint.StatusRunning
}

func (s *scripted) waitSignal(name string) {
	s.t.Helper()
	s.must(transition.ParkForSignal{Step: s.run.Step, Name: name, TTL: time.Hour})
}

func (s *scripted) park() {
	s.t.Helper()
	s.must(transition.ParkForApproval{Step: s.run.Step, Payload: []byte(payloads[0]), Group: "adjusters", TTL: time.Hour})
}

func (s *scripted) sleep() {
	s.worker(func(r *checkpoint.Run) {
		r.Step++
		r.StepName = fmt.Sprint("s", r.Step)
		r.Status, r.Wait = checkpoint.StatusWaiting, &checkpoint.Wait{Kind: checkpoint.WaitTimer, Step: r.Step, StepName: r.StepName, Since: s.now, Deadline: s.now.Add(time.Hour)}
	})
}

func (s *scripted) moveOn() {
	s.worker(func(r *checkpoint.Run) { r.Step++; r.StepName = fmt.Sprint("s", r.Step) })
}

// startChildren: the step at the cursor started child runs and the run
// waits for them at the next.
func (s *scripted) startChildren() {
	s.moveOn()
	s.worker(func(r *checkpoint.Run) {
		r.Status, r.Wait = checkpoint.StatusWaiting, &checkpoint.Wait{Kind: checkpoint.WaitChildren, Step: r.Step, StepName: r.StepName, Since: s.now}
	})
}

func (s *scripted) die() {
	s.t.Helper()
	s.must(transition.Die{Reason: "failed"})
}

// consume: the step at the cursor commits having read every pending
// signal (and marker).
func (s *scripted) consume() {
	s.worker(func(r *checkpoint.Run) {
		var ids []string
		for _, sig := range r.Signals {
			if sig.Pending() {
				ids = append(ids, sig.ID)
			}
		}
		r.ConsumeSignals(r.Step, ids)
	})
}
