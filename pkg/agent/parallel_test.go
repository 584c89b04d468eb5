package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/model"
)

// Acceptance (issue 15): with ParallelTools the five calls of one model
// turn run as the branches of one fan-out, each with its own key
// <run>:step<n>.<i>; two gated calls park the run in turn with their exact
// call and key; the rejected one is told to the model beside the others'
// results, in call order; every call is counted once and no key is used
// twice.
func TestParallelToolCalls(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) { parallelToolCalls(t, kind) })
	}
}

func parallelToolCalls(t *testing.T, kind string) {
	calls := []model.ToolCall{
		{ID: "c1", Name: "lookup", Args: json.RawMessage(`{"n":1}`)},
		{ID: "c2", Name: "refund", Args: json.RawMessage(`{"n":2}`)},
		{ID: "c3", Name: "lookup", Args: json.RawMessage(`{"n":3}`)},
		{ID: "c4", Name: "refund", Args: json.RawMessage(`{"n":4}`)},
		{ID: "c5", Name: "nope", Args: json.RawMessage(`{"n":5}`)},
	}
	var seenResults []model.ToolResult
	var mu sync.Mutex
	m := &fakeModel{answer: func(turn int, req model.Request) (model.Response, error) {
		if turn == 0 {
			return model.Response{Model: "fake-1", StopReason: model.StopToolUse, ToolCalls: calls, Usage: model.Usage{InputTokens: 100, OutputTokens: 50}}, nil
		}
		mu.Lock()
		seenResults = req.Messages[len(req.Messages)-1].ToolResults
		mu.Unlock()
		return answer("done"), nil
	}}
	var keys sync.Map
	run := func(_ context.Context, key agent.Key, args struct{ N int }) (string, error) {
		if _, dup := keys.LoadOrStore(key, args.N); dup {
			return "", fmt.Errorf("key %s presented twice", key)
		}
		return fmt.Sprintf("result %d under %s", args.N, key), nil
	}
	lookup := agent.NewTool("lookup", "Look up.", `{"type":"object"}`, run)
	refund := agent.NewTool("refund", "Refund.", `{"type":"object"}`, run).Effect().NeedsApproval(agent.Approval{Group: "supervisors", TTL: time.Hour})
	wf := agent.New(agent.Config{Name: "par", Version: 2, Model: m, ModelName: "fake-1", Tools: []*agent.Tool{lookup, refund}, ParallelTools: true})
	f := startOn(t, kind, wf, blob.NewMemory("DURABLE_BLOBS"))
	f.Start("par", "par-1", `{"message": "do five things"}`)
	ctx := context.Background()

	// The two gated calls, one at a time, each with the key it runs with.
	for i, want := range []struct {
		call, key string
		reject    bool
	}{{"c2", "par-1:step3.2", false}, {"c4", "par-1:step3.4", true}} {
		var parked checkpoint.Run
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			parked = f.WaitStatus("par-1", checkpoint.StatusWaiting, 30*time.Second)
			if len(parked.Approvals) == i || time.Now().After(deadline) {
				break
			}
		}
		var p agent.ToolCallApproval
		if err := json.Unmarshal(parked.Wait.Payload, &p); err != nil || p.CallID != want.call || string(p.Key) != want.key || p.Tool != "refund" {
			t.Fatalf("park %d: payload %s, want call %s with key %s", i+1, parked.Wait.Payload, want.call, want.key)
		}
		if _, err := f.Client.Decide(ctx, client.Decision{RunID: "par-1", By: "sam", Reject: want.reject, Reason: "too much", Channel: client.ChannelCLI, PayloadSHA256: parked.Wait.PayloadSHA256}); err != nil {
			t.Fatal(err)
		}
	}
	done := f.WaitStatus("par-1", checkpoint.StatusCompleted, 60*time.Second)

	mu.Lock()
	results := seenResults
	mu.Unlock()
	if len(results) != 5 {
		t.Fatalf("the model saw %d results, want 5 in call order", len(results))
	}
	for i, r := range results {
		if r.CallID != calls[i].ID {
			t.Fatalf("result %d is of call %s, want %s (call order)", i+1, r.CallID, calls[i].ID)
		}
	}
	for i, want := range []string{"result 1 under par-1:step3.1", "result 2 under par-1:step3.2", "result 3 under par-1:step3.3", "rejected this call", "no such tool"} {
		if !strings.Contains(results[i].Content, want) {
			t.Fatalf("result %d: %q, want %q", i+1, results[i].Content, want)
		}
	}
	count := 0
	keys.Range(func(_, _ any) bool { count++; return true })
	if count != 3 {
		t.Fatalf("%d keys presented, want 3 (the rejected and the unknown call run nothing)", count)
	}
	cps := f.Checkpoints("par-1")
	st := stateOf(t, cps[len(cps)-1])
	if st.Usage.ToolCalls != 5 || st.Usage.ModelCalls != 2 {
		t.Fatalf("usage %+v: want 5 tool calls and 2 model calls, each counted once", st.Usage)
	}
	if cps[1].Name != agent.StepTool || cps[1].FanOut == nil || len(cps[1].FanOut.Branches) != 5 || cps[2].Name != agent.StepToolJoin {
		t.Fatalf("steps %s, %s: want the tool step's fan-out of 5 and its join", cps[1].Name, cps[2].Name)
	}
	if kinds := auditKindsOf(done); kinds != "parked,decision,reparked,decision" {
		t.Fatalf("audit %s", kinds)
	}
}

func auditKindsOf(run checkpoint.Run) string {
	var k []string
	for _, a := range run.Audit {
		k = append(k, a.Kind)
	}
	return strings.Join(k, ",")
}
