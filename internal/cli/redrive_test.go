package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/queue"
)

// `durable runs redrive` puts a dead run back to work; `durable dlq list`
// shows the dead letters.
func TestRedriveAndDLQCommands(t *testing.T) {
	e := newEnv(t, "kv")
	ctx := context.Background()
	now := time.Now().UTC()
	// A claim that died at its first step (as after a fault now fixed).
	if _, err := e.store.CreateRun(ctx, checkpoint.Run{ID: "claim-dead", Workflow: "claim", Version: 1, Status: checkpoint.StatusDead,
		Step: 1, StepName: "receive", Input: json.RawMessage(`{}`), Error: "step receive failed 5 times: boom", CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	dl := queue.DeadLetter{RunID: "claim-dead", Workflow: "claim", Step: 1, StepName: "receive", Reason: "step receive failed 5 times: boom", Attempt: 5, At: now}
	if err := queue.PublishDeadLetter(ctx, e.js, checkpoint.Run{ID: dl.RunID}, dl); err != nil {
		t.Fatal(err)
	}
	r := e.mustCLI(0, "dlq", "list", "--json")
	var dls []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &dls); err != nil || len(dls) != 1 || dls[0]["run_id"] != "claim-dead" || dls[0]["reason"] != dl.Reason {
		t.Fatalf("dlq list --json: %v %s", err, r.stdout)
	}
	if r := e.mustCLI(0, "dlq", "list"); !strings.Contains(r.stdout, "claim-dead") || !strings.Contains(r.stdout, "boom") {
		t.Fatalf("dlq list: %s", r.stdout)
	}
	e.mustCLI(2, "dlq", "show")
	e.mustCLI(3, "runs", "redrive", "claim-nope")

	r = e.mustCLI(0, "runs", "redrive", "claim-dead", "--by", "oncall")
	if !strings.Contains(r.stdout, "redriven claim-dead at step 1") {
		t.Fatalf("redrive: %s", r.stdout)
	}
	// It runs again from its failed step and parks for the adjuster.
	run := e.waitStatus("claim-dead", checkpoint.StatusWaiting)
	if run.Redrives != 1 || run.Audit[0].Kind != checkpoint.AuditRedriven || run.Audit[0].By != "oncall" {
		t.Fatalf("redriven run %+v", run)
	}
	if r := e.mustCLI(1, "runs", "redrive", "claim-dead"); !strings.Contains(r.stderr, "not dead") {
		t.Fatalf("second redrive: %s", r.stderr)
	}
}
