package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// runs show prints a run's state whole up to 1000 bytes; past that it
// cuts it and says how to see it whole, instead of a bare "…" (issue 25).
func TestRunsShowSaysHowToSeeACutState(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for id, notes := range map[string]int{"state-small": 10, "state-big": 200} {
			state, _ := json.Marshal(map[string]any{"notes": strings.Split(strings.Repeat("a note,", notes), ",")})
			now := time.Now().UTC()
			// Written straight into the store: no step message names it,
			// so no worker touches it.
			run, err := e.store.CreateRun(ctx, checkpoint.Run{ID: id, Workflow: "claim", Version: 1, Step: 1, StepName: "intake",
				Status: checkpoint.StatusRunning, CreatedAt: now, UpdatedAt: now})
			if err != nil {
				t.Fatal(err)
			}
			run.Status = checkpoint.StatusCompleted
			if _, err := e.store.Commit(ctx, run, checkpoint.Checkpoint{Step: 1, Name: "intake", State: state, At: now, Attempt: 1}); err != nil {
				t.Fatal(err)
			}
			text := e.mustCLI(0, "runs", "show", id).stdout
			whole := "state " + string(state) + "\n"
			note := fmt.Sprintf("… (cut at 1000 of %d bytes; `durable runs show %s --json` shows it whole)\n", len(state), id)
			if len(state) <= 1000 && !strings.Contains(text, whole) {
				t.Errorf("runs show %s: a state of %d bytes is not shown whole:\n%s", id, len(state), text)
			}
			if len(state) > 1000 && (!strings.Contains(text, "state "+string(state[:1000])+note) || strings.Contains(text, whole)) {
				t.Errorf("runs show %s: a state of %d bytes is not cut at 1000 saying how to see it whole:\n%s", id, len(state), text)
			}
		}
	})
}

// runs show says how long a step (and a fan-out's branch) waited for
// rate-limit tokens, next to its wait for a slot, and its --json has the
// checkpoint's token_resource and token_wait_ms.
func TestRunsShowSaysHowLongAStepWaitedForTokens(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		now := time.Now().UTC()
		// Written straight into the store: no step message names it, so
		// no worker touches it.
		run, err := e.store.CreateRun(ctx, checkpoint.Run{ID: "tokens-1", Workflow: "claim", Version: 1, Step: 1, StepName: "assess",
			Status: checkpoint.StatusRunning, CreatedAt: now, UpdatedAt: now})
		if err != nil {
			t.Fatal(err)
		}
		steps := []checkpoint.Checkpoint{
			{Step: 1, Name: "assess", Next: "ask", Attempt: 3, Resource: "model", SlotWaitMS: 1200, TokenResource: "anthropic", TokenWaitMS: 2000},
			{Step: 2, Name: "ask", Next: "join", Attempt: 1, TokenResource: "anthropic", TokenWaitMS: 350.5,
				FanOut: &checkpoint.FanOut{Branches: []checkpoint.Branch{{Step: "fetch", Input: json.RawMessage(`{}`)}}}},
		}
		for _, cp := range steps {
			cp.RunID, cp.State, cp.Status, cp.At = run.ID, json.RawMessage(`{}`), checkpoint.StatusRunning, now
			run.Step, run.StepName = cp.Step+1, cp.Next
			if run, err = e.store.Commit(ctx, run, cp); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.store.CommitBranch(ctx, checkpoint.Checkpoint{RunID: run.ID, Step: 3, Branch: 1, Of: 1, Name: "fetch", State: json.RawMessage(`{}`),
			Status: checkpoint.StatusRunning, Attempt: 2, At: now, TokenResource: "search", TokenWaitMS: 1500}); err != nil {
			t.Fatal(err)
		}
		text := e.mustCLI(0, "runs", "show", run.ID).stdout
		for _, want := range []string{
			"waited 1.20s for a slot of model; waited up to 2.00s for tokens of anthropic",
			"after 2 deliveries that left no commit and no failure record (handed back for tokens, or a worker crashed or its ack wait ran out)",
			"waited up to 350.5ms for tokens of anthropic",
			"3.1 fetch  attempt 2", "waited up to 1.50s for tokens of search",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("runs show does not say %q:\n%s", want, text)
			}
		}
		var v struct {
			Checkpoints []map[string]any `json:"checkpoints"`
			Branches    []map[string]any `json:"branches"`
		}
		if err := json.Unmarshal([]byte(e.mustCLI(0, "runs", "show", run.ID, "--json").stdout), &v); err != nil {
			t.Fatal(err)
		}
		if len(v.Checkpoints) != 2 || len(v.Branches) != 1 {
			t.Fatalf("runs show --json: %d checkpoints, %d branches; want 2, 1", len(v.Checkpoints), len(v.Branches))
		}
		for _, got := range []map[string]any{v.Checkpoints[0], v.Checkpoints[1], v.Branches[0]} {
			if got["token_resource"] == nil || got["token_wait_ms"] == nil {
				t.Errorf("runs show --json: no token_resource or token_wait_ms in %v", got)
			}
		}
		if c := v.Checkpoints[0]; c["token_resource"] != "anthropic" || c["token_wait_ms"] != 2000.0 || c["resource"] != "model" || c["slot_wait_ms"] != 1200.0 {
			t.Errorf("runs show --json, step 1: %v", c)
		}
	})
}
