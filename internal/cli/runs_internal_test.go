package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// A run whose state carries notices (an agent loop: the model or its tools
// changed since the run started) shows them under its header.
func TestRunsShowPrintsStateNotices(t *testing.T) {
	var out strings.Builder
	printRun(&out, client.RunView{RunID: "r-1", Workflow: "refund-agent", Status: checkpoint.StatusCompleted,
		State: json.RawMessage(`{"answer":"done","notices":["the model changed since the run started: a, now b"]}`)})
	if !strings.Contains(out.String(), "\nnotice: the model changed since the run started: a, now b\n") {
		t.Fatalf("runs show:\n%s", out.String())
	}
	out.Reset()
	printRun(&out, client.RunView{RunID: "r-2", Workflow: "claim", State: json.RawMessage(`{"notices":"not a list"}`)})
	if strings.Contains(out.String(), "\nnotice:") {
		t.Fatalf("a state without a notices list printed one:\n%s", out.String())
	}
}
