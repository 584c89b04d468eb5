package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

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
