package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
)

// ExpireMany expires what is due, tells when the rest is, and reports a
// run that does not exist, each in the order of the ids.
func TestExpireMany(t *testing.T) {
	f := testfleet.New(t, "redis")
	ctx := context.Background()
	if err := queue.Provision(ctx, f.JS, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	park := func(id string, deadline time.Time) {
		t.Helper()
		since := deadline.Add(-time.Hour)
		_, err := f.Store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "em", Version: 1, Status: checkpoint.StatusWaiting, Step: 2, StepName: "ask",
			CreatedAt: since, UpdatedAt: since, Wait: &checkpoint.Wait{Step: 2, StepName: "ask", Payload: json.RawMessage(`{}`), Group: "g", Since: since, Deadline: deadline}})
		if err != nil {
			t.Fatal(err)
		}
	}
	park("em-due", now.Add(-time.Second))
	park("em-later", now.Add(time.Hour))
	out := f.Client.ExpireMany(ctx, []string{"em-due", "em-missing", "em-later"}, now)
	if len(out) != 3 || out[0].ID != "em-due" || out[1].ID != "em-missing" || out[2].ID != "em-later" {
		t.Fatalf("outcomes %+v: want one per id, in order", out)
	}
	if out[0].Err != nil || out[0].Action != client.ExpireRejected || !out[0].Next.IsZero() {
		t.Errorf("due run: %+v", out[0])
	}
	if !errors.Is(out[1].Err, checkpoint.ErrNotFound) {
		t.Errorf("missing run: %+v, want ErrNotFound", out[1])
	}
	if out[2].Err != nil || out[2].Action != client.ExpireNone || !out[2].Next.Equal(now.Add(time.Hour)) {
		t.Errorf("run due later: %+v", out[2])
	}
	if r := f.Get("em-due"); r.Status != checkpoint.StatusRunning || r.Step != 2 || len(r.Approvals) != 1 {
		t.Errorf("expired run: %s at %d, approvals %+v", r.Status, r.Step, r.Approvals)
	}
}

// ExpireMany builds its messages itself, for an async publish: they must
// be what pkg/queue's publishers send.
func TestExpireMessagesAreQueues(t *testing.T) {
	f := testfleet.New(t, "redis")
	ctx := context.Background()
	if err := queue.Provision(ctx, f.JS, queue.Config{}); err != nil {
		t.Fatal(err)
	}
	run := checkpoint.Run{ID: "drift-1", Workflow: "drift", Status: checkpoint.StatusRunning, Step: 3, StepName: "pay",
		Error: "none", Rev: 7, UpdatedAt: time.Now().UTC()}
	stored := func(stream, subject string) *jetstream.RawStreamMsg {
		t.Helper()
		st, err := f.JS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	same := func(what string, got *nats.Msg, err error, want *jetstream.RawStreamMsg) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.Subject != want.Subject || string(got.Data) != string(want.Data) || !maps.EqualFunc(got.Header, want.Header, slices.Equal) {
			t.Errorf("%s built:\n  %s %s %v\nqueue published:\n  %s %s %v", what, got.Subject, got.Data, got.Header, want.Subject, want.Data, want.Header)
		}
	}

	if _, err := queue.PublishStep(ctx, f.JS, queue.StepMsg{RunID: run.ID, Workflow: run.Workflow, Step: run.Step, Name: run.StepName}, "drift-1:3:resume1"); err != nil {
		t.Fatal(err)
	}
	msg, err := client.StepMessage(run, "drift-1:3:resume1")
	same("step message", msg, err, stored(queue.StepStream, queue.StepSubject(run.Workflow, run.ID)))

	if err := queue.PublishStatus(ctx, f.JS, run); err != nil {
		t.Fatal(err)
	}
	msg, err = client.StatusMessage(run)
	same("status event", msg, err, stored(queue.EventStream, queue.EventSubject(run.Workflow, string(run.Status))))

	rem := client.Reminder{RunID: run.ID, Workflow: run.Workflow, Step: 3, Group: "g", Left: 1}
	if err := queue.PublishEvent(ctx, f.JS, run.Workflow, "reminder", "drift-1:3:remind0:1", rem); err != nil {
		t.Fatal(err)
	}
	msg, err = client.EventMessage(run.Workflow, "reminder", "drift-1:3:remind0:1", rem)
	same("reminder event", msg, err, stored(queue.EventStream, queue.EventSubject(run.Workflow, "reminder")))
}
