package transition_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/transition"
)

// storeSequences is how many generated sequences TestModelOnStores runs
// on each store.
const storeSequences = 150

// TestModelOnStores runs the model's generator against the real thing:
// runs in a real store, events through pkg/client (load, apply,
// compare-and-set, carry out), the worker's changes written to the store,
// step messages published to a real JetStream and read back off the
// wire. After every event the stored run is what Apply says it becomes,
// the step messages published for it are exactly the ones its commands
// name, each carrying the stored step, and no message id is ever
// presented for two different steps.
//
// The worker's commits go through Store.Commit with their checkpoints,
// so a redrive finds the checkpoint before its step as the client does.
// ChildrenEnded is left out: the children a checkpoint lists are never
// started here.
func TestModelOnStores(t *testing.T) {
	if testing.Short() {
		t.Skip("real stores")
	}
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := testfleet.New(t, kind)
			ctx := context.Background()
			if err := queue.Provision(ctx, f.JS, queue.Config{}); err != nil {
				t.Fatal(err)
			}
			info := checkpoint.WorkflowInfo{Name: "claim", Version: 1, FirstStep: "s1", Steps: []string{"s1"}, Signals: []string{"go", "stop"}}
			if err := f.Store.RegisterWorkflow(ctx, info); err != nil {
				t.Fatal(err)
			}
			w := watchSteps(t, f.NC)
			events := 0
			for seed := range uint64(storeSequences) {
				n, err := runOnStore(ctx, f, w, seed)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				events += n
			}
			t.Logf("%d sequences, %d events, %d step messages published", storeSequences, events, w.mark())
			if events < storeSequences*5 || w.mark() < storeSequences/5 {
				t.Fatalf("the generator exercised too little: %d events, %d messages", events, w.mark())
			}
		})
	}
}

// runOnStore runs sequence seed and says how many events it applied.
func runOnStore(ctx context.Context, f *testfleet.Fleet, wire *wire, seed uint64) (int, error) {
	rng := rand.New(rand.NewPCG(seed, 27))
	id := fmt.Sprintf("m-%d", seed)
	_, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Status: checkpoint.StatusRunning,
		Step: 1, StepName: "s1", StartedBy: pick(rng, "ann", "bob", ""), Input: json.RawMessage(`{}`)})
	if err != nil {
		return 0, err
	}
	var trail []string
	events := 0
	for range 5 + rng.IntN(25) {
		before, err := f.Store.GetRun(ctx, id)
		if err != nil {
			return events, err
		}
		if rng.IntN(3) == 0 {
			next := before
			ttl := pick(rng, time.Nanosecond, time.Hour) // due at once, or not
			said, ev, changed := worker(rng, &next, time.Now().UTC(), ttl)
			trail = append(trail, said)
			if ev != nil { // as the worker stores its events
				r := transition.Apply(before, ev, time.Now())
				if !r.Store {
					continue
				}
				if c, ok := ev.(transition.Commit); ok {
					_, err = f.Store.Commit(ctx, r.Run, c.Checkpoint)
				} else {
					_, err = f.Store.UpdateRun(ctx, r.Run)
				}
				if err != nil {
					return events, fmt.Errorf("the worker's %T: %w", ev, err)
				}
				continue
			}
			if changed {
				if _, err := f.Store.UpdateRun(ctx, next); err != nil {
					return events, fmt.Errorf("the worker's change: %w", err)
				}
			}
			continue
		}
		ev := event(rng, before)
		if _, ok := ev.(transition.ChildrenEnded); ok {
			continue
		}
		if rd, ok := ev.(transition.Redrive); ok { // the client reads the checkpoint before
			rd.Before = nil
			if cp, err := f.Store.Checkpoint(ctx, id, before.Step-1); err == nil {
				rd.Before = &cp
			}
			ev = rd
		}
		if rp, ok := ev.(transition.Repair); ok { // no worker beats here: no progress but the record's
			ev = transition.Repair{Cutoff: rp.Cutoff}
		}
		trail = append(trail, fmt.Sprintf("%T%+v", ev, ev))
		if err := checkOnStore(ctx, f, wire, before, ev); err != nil {
			return events, fmt.Errorf("%w\nafter %v", err, trail)
		}
		events++
	}
	return events, nil
}

// checkOnStore carries out ev on the stored run before through pkg/client
// and checks the run stored and the messages published against Apply.
func checkOnStore(ctx context.Context, f *testfleet.Fleet, wire *wire, before checkpoint.Run, ev transition.Event) error {
	mark := wire.mark()
	now := time.Now().UTC()
	want := transition.Apply(before, ev, now)
	err := carryOut(ctx, f.Client, before.ID, ev, now)
	after, gerr := f.Store.GetRun(ctx, before.ID)
	if gerr != nil {
		return gerr
	}
	switch {
	case (want.Err != nil) != (err != nil):
		return fmt.Errorf("%T: Apply says %v, the client %v", ev, want.Err, err)
	case !want.Store && after.Rev != before.Rev:
		return fmt.Errorf("%T stored a change Apply does not make", ev)
	case want.Store && summary(after) != summary(want.Run):
		return fmt.Errorf("%T stored\n  %s\nApply says\n  %s", ev, summary(after), summary(want.Run))
	}
	var ids []string
	for _, c := range want.Commands {
		if p, ok := c.(transition.PublishStep); ok {
			ids = append(ids, p.MsgID)
		}
	}
	got := wire.since(mark, before.ID, len(ids))
	var gotIDs []string
	for _, m := range got {
		gotIDs = append(gotIDs, m.id)
		if m.step != after.Step {
			return fmt.Errorf("%T published %s for step %d; the run is at %d", ev, m.id, m.step, after.Step)
		}
	}
	slices.Sort(ids)
	slices.Sort(gotIDs)
	if !slices.Equal(ids, gotIDs) {
		return fmt.Errorf("%T published %v; its commands name %v", ev, gotIDs, ids)
	}
	return wire.err()
}

// carryOut does ev to run id as its caller would, through pkg/client.
func carryOut(ctx context.Context, c *client.Client, id string, ev transition.Event, now time.Time) error {
	switch e := ev.(type) {
	case transition.Decide:
		_, err := c.Decide(ctx, client.Decision{RunID: id, By: e.By, Reject: e.Reject, Channel: e.Channel,
			PayloadSHA256: e.PayloadSHA256, Step: e.Step, Groups: e.Groups, FourEyes: e.FourEyes})
		return err
	case transition.Refuse:
		return c.RecordRefusal(ctx, id, e.Entry)
	case transition.Cancel:
		_, err := c.Cancel(ctx, id, e.By, client.Via(e.Channel))
		return err
	case transition.Signal:
		_, err := c.Signal(ctx, client.SignalRequest{RunID: id, Name: e.Signal.Name, ID: e.Signal.ID, Data: e.Signal.Data, By: e.Signal.By, Channel: e.Signal.Channel})
		return err
	case transition.Expire:
		_, err := c.Expire(ctx, id, now)
		return err
	case transition.Redrive:
		_, err := c.Redrive(ctx, id, e.By, client.Via(e.Channel))
		return err
	case transition.Repair:
		run, err := c.Store().GetRun(ctx, id)
		if err != nil {
			return err
		}
		_, err = c.Repair(ctx, run, e.Cutoff)
		return err
	}
	return fmt.Errorf("no caller for %T", ev)
}

// summary is what a change decides of a run, without the times the
// client takes itself.
func summary(r checkpoint.Run) string {
	s := fmt.Sprintf("%s step %d %s resumes %d redrives %d approvals %d signals %d consumed %d refusals %d audit %d error %q",
		r.Status, r.Step, r.StepName, r.Resumes, r.Redrives, len(r.Approvals), len(r.Signals), len(r.Consumed), r.Refusals, len(r.Audit), r.Error)
	if w := r.Wait; w != nil {
		s += fmt.Sprintf(" wait %s step %d group %s reminders %d", w.Kind, w.Step, w.Group, w.Reminders)
	}
	return s
}

// wire is every step message published, as a core subscriber sees it:
// also the ones the stream drops as duplicates.
type wire struct {
	mu    sync.Mutex
	msgs  []wireMsg
	steps map[string]int // message id -> the step it carried
	bad   error
}

type wireMsg struct {
	id, run string
	step    int
}

func watchSteps(t *testing.T, nc *nats.Conn) *wire {
	t.Helper()
	w := &wire{steps: map[string]int{}}
	sub, err := nc.Subscribe(queue.StepSubject("claim", "*"), func(m *nats.Msg) {
		var sm queue.StepMsg
		err := json.Unmarshal(m.Data, &sm)
		w.mu.Lock()
		defer w.mu.Unlock()
		id := m.Header.Get(nats.MsgIdHdr)
		if prev, seen := w.steps[id]; err == nil && seen && prev != sm.Step && w.bad == nil {
			w.bad = fmt.Errorf("message id %s presented for step %d and for step %d", id, prev, sm.Step)
		}
		if err != nil && w.bad == nil {
			w.bad = err
		}
		w.steps[id] = sm.Step
		w.msgs = append(w.msgs, wireMsg{id: id, run: sm.RunID, step: sm.Step})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return w
}

func (w *wire) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.msgs)
}

func (w *wire) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bad
}

// since returns the messages of run seen after mark, once at least want
// came (or two seconds passed), and after a moment for any extra one
// (the client returns once the stream acknowledged its publishes, so a
// message is on its way to this subscriber by then).
func (w *wire) since(mark int, run string, want int) []wireMsg {
	start := time.Now()
	deadline := start.Add(2 * time.Second)
	for {
		var out []wireMsg
		w.mu.Lock()
		for _, m := range w.msgs[mark:] {
			if m.run == run {
				out = append(out, m)
			}
		}
		w.mu.Unlock()
		if len(out) >= want && time.Since(start) > 10*time.Millisecond || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}
