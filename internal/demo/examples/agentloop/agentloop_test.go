package agentloop_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/demo/examples/agentloop"
	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

func TestAgentLoopRunsItsTurns(t *testing.T) {
	f := testfleet.New(t, "redis")
	f.StartWorker(steps.NewRegistry().MustRegister(agentloop.New()), nil)
	f.Start(agentloop.Name, "agent-1", `{"turns": 3}`)
	f.WaitStatus("agent-1", checkpoint.StatusCompleted, 20*time.Second)
	cps := f.Checkpoints("agent-1")
	// think, act ×3, then think, answer: 8 steps.
	if len(cps) != 8 || cps[7].Name != "answer" {
		t.Fatalf("%d checkpoints, last %+v", len(cps), cps[len(cps)-1])
	}
	var st agentloop.State
	if err := json.Unmarshal(cps[7].State, &st); err != nil || st.Turn != 3 || len(st.History) != 3 {
		t.Fatalf("final state %+v (%v)", st, err)
	}
}
