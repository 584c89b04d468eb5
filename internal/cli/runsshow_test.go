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
