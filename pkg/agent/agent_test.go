package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/model"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// fakeModel answers by a function of the request (stateless, like a
// transcript) and counts the calls it served and the tokens it billed.
type fakeModel struct {
	answer func(turn int, req model.Request) (model.Response, error)
	calls  atomic.Int64
	tokens atomic.Int64
}

func (m *fakeModel) Complete(_ context.Context, req model.Request) (model.Response, error) {
	turn := 0
	for _, msg := range req.Messages {
		if msg.Role == model.RoleAssistant {
			turn++
		}
	}
	resp, err := m.answer(turn, req)
	if err != nil {
		return resp, err
	}
	m.calls.Add(1)
	m.tokens.Add(resp.Usage.InputTokens + resp.Usage.OutputTokens)
	return resp, nil
}

func toolCall(turn int, name string, args string) model.Response {
	return model.Response{Model: "fake-1", StopReason: model.StopToolUse,
		ToolCalls: []model.ToolCall{{ID: fmt.Sprintf("call_%d", turn), Name: name, Args: json.RawMessage(args)}},
		Usage:     model.Usage{InputTokens: 100, OutputTokens: 50}}
}

func answer(text string) model.Response {
	return model.Response{Model: "fake-1", Text: text, StopReason: model.StopEndTurn, Usage: model.Usage{InputTokens: 100, OutputTokens: 50}}
}

func start(t *testing.T, wf steps.Definition, blobs blob.Store) *testfleet.Fleet {
	t.Helper()
	return startOn(t, "redis", wf, blobs)
}

func startOn(t *testing.T, kind string, wf steps.Definition, blobs blob.Store) *testfleet.Fleet {
	t.Helper()
	f := testfleet.New(t, kind)
	f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Blobs = blobs })
	return f
}

func stateOf(t *testing.T, cp checkpoint.Checkpoint) agent.State {
	t.Helper()
	var st agent.State
	if err := json.Unmarshal(cp.State, &st); err != nil {
		t.Fatalf("state of step %d: %v", cp.Step, err)
	}
	return st
}

// A 50-call loop whose tool returns 100 KB each time: every checkpoint
// stays under 8 KB, and the model still reads the whole conversation.
func TestFiftyToolCallsKeepCheckpointsSmall(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) { fiftyToolCalls(t, kind) })
	}
}

func fiftyToolCalls(t *testing.T, kind string) {
	const calls, resultBytes = 50, 100_000
	page := func(i int) string {
		head := fmt.Sprintf("page %d:", i)
		return head + strings.Repeat(string(rune('a'+i%26)), resultBytes-len(head))
	}
	m := &fakeModel{answer: func(turn int, req model.Request) (model.Response, error) {
		// The conversation is whole: the prompt, then a call and its
		// result per turn, and each result reads back as the tool wrote
		// it (cut at the view limit).
		if want := 1 + 2*turn; len(req.Messages) != want {
			return model.Response{}, steps.Permanent(fmt.Errorf("turn %d: %d messages, want %d", turn, len(req.Messages), want))
		}
		for i := 0; i < turn; i++ {
			r := req.Messages[2+2*i].ToolResults
			if len(r) != 1 || r[0].CallID != fmt.Sprintf("call_%d", i) || !strings.HasPrefix(r[0].Content, page(i)[:agent.DefaultViewLimit]) {
				return model.Response{}, steps.Permanent(fmt.Errorf("turn %d: result of call %d reads back wrong", turn, i))
			}
		}
		if turn == calls {
			return answer("read them all"), nil
		}
		return toolCall(turn, "fetch", fmt.Sprintf(`{"page": %d}`, turn)), nil
	}}
	var keys sync.Map
	fetch := agent.NewTool("fetch", "Fetch a page.", `{"type":"object","properties":{"page":{"type":"integer"}}}`,
		func(_ context.Context, key agent.Key, args struct{ Page int }) (string, error) {
			if _, dup := keys.LoadOrStore(key, args.Page); dup {
				return "", fmt.Errorf("key %s presented twice", key)
			}
			return page(args.Page), nil
		})
	f := startOn(t, kind, agent.New(agent.Config{Name: "reader", Version: 1, Model: m, ModelName: "fake-1", Tools: []*agent.Tool{fetch}}), blob.NewMemory("DURABLE_BLOBS"))
	f.Start("reader", "read-1", `{"message": "read fifty pages"}`)
	f.WaitStatus("read-1", checkpoint.StatusCompleted, 120*time.Second)

	cps := f.Checkpoints("read-1")
	if len(cps) != 2*calls+1 {
		t.Fatalf("%d checkpoints, want %d", len(cps), 2*calls+1)
	}
	largest, first10, last10 := 0, 0, 0
	for i, cp := range cps {
		doc, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		n := len(doc)
		if n >= 8<<10 {
			t.Errorf("checkpoint %d (%s) is %d bytes, want < 8 KiB", cp.Step, cp.Name, n)
		}
		largest = max(largest, n)
		if i < 20 {
			first10 = max(first10, n)
		}
		if i >= len(cps)-20 {
			last10 = max(last10, n)
		}
	}
	// Growth per step is bounded: the last steps are no larger than the
	// first ones, whatever the history's length.
	if last10 > first10+256 {
		t.Errorf("checkpoints grow: largest of the first 20 %d bytes, of the last 20 %d", first10, last10)
	}
	t.Logf("%d checkpoints, largest %d bytes (first 20: %d, last 20: %d); history of %d entries", len(cps), largest, first10, last10, stateOf(t, cps[len(cps)-1]).History.Len())
	st := stateOf(t, cps[len(cps)-1])
	if st.Answer != "read them all" || st.Usage.ToolCalls != calls || st.Usage.ModelCalls != calls+1 || m.calls.Load() != calls+1 {
		t.Fatalf("answer %q, usage %+v, model served %d calls", st.Answer, st.Usage, m.calls.Load())
	}
	if st.History.Len() != 2*calls+2 || st.History.Sealed == nil {
		t.Fatalf("history of %d entries, sealed %v", st.History.Len(), st.History.Sealed)
	}
}

// flakyBlobs fails the first Put of each object whose name contains match.
type flakyBlobs struct {
	blob.Store
	match  string
	failed sync.Map
}

func (b *flakyBlobs) Put(ctx context.Context, name string, data []byte) (blob.Ref, error) {
	if strings.Contains(name, b.match) {
		if _, done := b.failed.LoadOrStore(name, true); !done {
			return blob.Ref{}, errors.New("blob store unavailable (injected)")
		}
	}
	return b.Store.Put(ctx, name, data)
}

// The run stops at its token budget, and calls read back from the journal
// by a retried step count once: the run's tokens are the tokens billed.
func TestTokenBudgetCountsReplaysOnce(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) { tokenBudget(t, kind) })
	}
}

func tokenBudget(t *testing.T, kind string) {
	m := &fakeModel{answer: func(turn int, req model.Request) (model.Response, error) {
		return toolCall(turn, "note", `{}`), nil // never answers: only the budget stops it
	}}
	note := agent.NewTool("note", "Take a note.", "", func(_ context.Context, key agent.Key, _ struct{}) (string, error) {
		return "noted under " + string(key), nil
	})
	// A tail limit of 1 seals the history on every step; the first seal of
	// each step fails once, after the model call was recorded: the retry
	// reads the recording.
	blobs := &flakyBlobs{Store: blob.NewMemory("DURABLE_BLOBS"), match: "/history/"}
	wf := agent.New(agent.Config{Name: "noter", Version: 1, Model: m, ModelName: "fake-1", Tools: []*agent.Tool{note}, TailLimit: 1,
		Retry: steps.RetryPolicy{Attempts: 3, Backoff: 10 * time.Millisecond}})
	f := startOn(t, kind, wf, blobs)
	f.Start("noter", "budget-1", `{"message": "take notes", "budget": {"max_tokens": 600}}`)
	run := f.WaitStatus("budget-1", checkpoint.StatusDead, 60*time.Second)

	// 150 tokens a call: the fourth call reaches 600 and the fifth model
	// step stops before calling.
	if !strings.Contains(run.Error, "tokens budget reached: used 600 of 600") {
		t.Fatalf("run error %q", run.Error)
	}
	cps := f.Checkpoints("budget-1")
	st := stateOf(t, cps[len(cps)-1])
	replayed := 0
	for _, cp := range cps {
		for _, c := range cp.Journal {
			if c.Name == "model" && c.Replayed {
				replayed++
			}
		}
	}
	if m.calls.Load() != 4 || st.Usage.ModelCalls != 4 || st.Usage.Tokens() != 600 || m.tokens.Load() != 600 {
		t.Fatalf("model served %d calls, %d tokens; the run counted %d calls, %d tokens", m.calls.Load(), m.tokens.Load(), st.Usage.ModelCalls, st.Usage.Tokens())
	}
	if replayed != 4 {
		t.Fatalf("%d model calls read back from the journal, want 4 (each model step's first attempt failed after its call)", replayed)
	}
}

// With the park policy, the run asks to go on at its budget; an approval
// raises the budget by its first amount.
func TestBudgetParksForApprovalToContinue(t *testing.T) {
	m := &fakeModel{answer: func(turn int, req model.Request) (model.Response, error) {
		if turn == 3 {
			return answer("done"), nil
		}
		return toolCall(turn, "note", `{}`), nil
	}}
	note := agent.NewTool("note", "", "", func(_ context.Context, key agent.Key, _ struct{}) (string, error) { return "ok", nil })
	f := start(t, agent.New(agent.Config{Name: "noter", Version: 1, Model: m, ModelName: "fake-1", Tools: []*agent.Tool{note},
		Budget: agent.Budget{MaxTokens: 300, OnReach: agent.Park, Group: "leads"}}), blob.NewMemory("DURABLE_BLOBS"))
	f.Start("noter", "budget-2", `{"message": "go"}`)
	run := f.WaitStatus("budget-2", checkpoint.StatusWaiting, 30*time.Second)
	if run.Wait == nil || run.Wait.Group != "leads" || !strings.Contains(string(run.Wait.Payload), `"budget":"tokens","used":"300","limit":"300","raise_to":"600"`) {
		t.Fatalf("parked with %+v", run.Wait)
	}
	ctx := context.Background()
	if _, err := f.Client.Decide(ctx, client.Decision{RunID: "budget-2", By: "lee", Channel: "cli", PayloadSHA256: run.Wait.PayloadSHA256}); err != nil {
		t.Fatal(err)
	}
	f.WaitStatus("budget-2", checkpoint.StatusCompleted, 30*time.Second)
	if m.calls.Load() != 4 {
		t.Fatalf("model served %d calls, want 4", m.calls.Load())
	}
}

// A gated tool parks with the exact call; the approved call runs once with
// the step's key, a rejected one is told to the model.
func TestGatedToolParksWithTheCall(t *testing.T) {
	m := &fakeModel{answer: func(turn int, req model.Request) (model.Response, error) {
		switch turn {
		case 0:
			return toolCall(0, "refund", `{"amount": 50}`), nil
		case 1:
			return toolCall(1, "refund", `{"amount": 500}`), nil
		}
		last := req.Messages[len(req.Messages)-1].ToolResults[0]
		return answer(fmt.Sprintf("error=%t %s", last.IsError, last.Content)), nil
	}}
	var paid sync.Map
	refund := agent.NewTool("refund", "Refund.", "", func(_ context.Context, key agent.Key, a struct{ Amount int }) (string, error) {
		if _, dup := paid.LoadOrStore(key, a.Amount); dup {
			return "", fmt.Errorf("key %s twice", key)
		}
		return fmt.Sprintf("refunded %d", a.Amount), nil
	}).Effect().NeedsApproval(agent.Approval{Group: "leads", When: func(args json.RawMessage) (bool, error) {
		var a struct{ Amount int }
		err := json.Unmarshal(args, &a)
		return a.Amount > 100, err
	}})
	f := start(t, agent.New(agent.Config{Name: "refunder", Version: 1, Model: m, ModelName: "fake-1", Tools: []*agent.Tool{refund}}), blob.NewMemory("DURABLE_BLOBS"))
	ctx := context.Background()
	for _, reject := range []bool{false, true} {
		id := fmt.Sprintf("gate-%t", reject)
		f.Start("refunder", id, `{"message": "refund twice"}`)
		run := f.WaitStatus(id, checkpoint.StatusWaiting, 30*time.Second)
		var p agent.ToolCallApproval
		if err := json.Unmarshal(run.Wait.Payload, &p); err != nil || p.Tool != "refund" || string(p.Args) != `{"amount":500}` || p.Key != agent.Key(id+":step4") || run.Wait.Step != 4 {
			t.Fatalf("parked at step %d with %s (%v)", run.Wait.Step, run.Wait.Payload, err)
		}
		if _, err := f.Client.Decide(ctx, client.Decision{RunID: id, By: "lee", Reject: reject, Reason: "too much", Channel: "cli", PayloadSHA256: run.Wait.PayloadSHA256}); err != nil {
			t.Fatal(err)
		}
		f.WaitStatus(id, checkpoint.StatusCompleted, 30*time.Second)
		cps := f.Checkpoints(id)
		st := stateOf(t, cps[len(cps)-1])
		want := "error=false refunded 500"
		if reject {
			want = "error=true not run: lee rejected this call (too much)"
		}
		if st.Answer != want {
			t.Fatalf("%s: answer %q, want %q", id, st.Answer, want)
		}
		if _, ok := paid.Load(agent.Key(id + ":step2")); !ok {
			t.Fatalf("%s: the small refund did not run under %s:step2", id, id)
		}
		if _, ok := paid.Load(agent.Key(id + ":step4")); ok == reject {
			t.Fatalf("%s: the gated refund ran=%t", id, ok)
		}
	}
}

// A run parked for approval resumes on a worker deployed with another model
// and another tool schema: the run finishes and its state says both changed.
func TestRedeployWithOtherModelIsNoticed(t *testing.T) {
	m := &fakeModel{answer: func(turn int, req model.Request) (model.Response, error) {
		if turn == 0 {
			return toolCall(0, "refund", `{"amount": 500}`), nil
		}
		return answer("done"), nil
	}}
	refund := func(desc string) *agent.Tool {
		return agent.NewTool("refund", desc, "", func(_ context.Context, key agent.Key, a struct{ Amount int }) (string, error) {
			return fmt.Sprintf("refunded %d", a.Amount), nil
		}).Effect().NeedsApproval(agent.Approval{Group: "leads"})
	}
	flow := func(modelName, desc string) steps.Definition {
		return agent.New(agent.Config{Name: "redeployed", Version: 1, Model: m, ModelName: modelName, Tools: []*agent.Tool{refund(desc)}})
	}
	blobs := blob.NewMemory("DURABLE_BLOBS")
	f := testfleet.New(t, "redis")
	_, stop := f.StartWorker(steps.NewRegistry().MustRegister(flow("fake-1", "Refund.")), func(c *worker.Config) { c.Blobs = blobs })
	f.Start("redeployed", "notice-1", `{"message": "refund"}`)
	run := f.WaitStatus("notice-1", checkpoint.StatusWaiting, 30*time.Second)
	stop()
	f.StartWorker(steps.NewRegistry().MustRegister(flow("fake-2", "Refund an order.")), func(c *worker.Config) { c.Blobs = blobs })
	if _, err := f.Client.Decide(context.Background(), client.Decision{RunID: "notice-1", By: "lee", Channel: "cli", PayloadSHA256: run.Wait.PayloadSHA256}); err != nil {
		t.Fatal(err)
	}
	f.WaitStatus("notice-1", checkpoint.StatusCompleted, 30*time.Second)
	cps := f.Checkpoints("notice-1")
	st := stateOf(t, cps[len(cps)-1])
	if st.Answer != "done" {
		t.Fatalf("answer %q", st.Answer)
	}
	want := []string{"the model changed since the run started: fake-1, now fake-2", "the tools changed since the run started: schema "}
	if len(st.Notices) != 2 || st.Notices[0] != want[0] || !strings.HasPrefix(st.Notices[1], want[1]) {
		t.Fatalf("notices %q, want %q and %q...", st.Notices, want[0], want[1])
	}
	if first := stateOf(t, cps[0]); len(first.Notices) != 0 {
		t.Fatalf("notices before the redeploy: %q", first.Notices)
	}
}
