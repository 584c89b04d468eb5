package approver_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
)

type shipment struct {
	Delivered json.RawMessage `json:"delivered,omitempty"`
	By        string          `json:"by,omitempty"`
}

// signalFlow waits for the signal "delivered", which any token may send,
// and completes with its data.
func signalFlow() *steps.Workflow[shipment] {
	w := steps.New[shipment]("shipping", 1)
	return w.Step("await", awaitDelivered(w.Signal("delivered")))
}

// guardedFlow is signalFlow whose "delivered" only tokens of group claims
// (and operators) may send through the API.
func guardedFlow() *steps.Workflow[shipment] {
	w := steps.New[shipment]("guarded", 1)
	return w.Step("await", awaitDelivered(w.Signal("delivered", "claims")))
}

// awaitDelivered is the step that waits for signal delivered and
// completes with its data.
func awaitDelivered(delivered steps.SignalRef[shipment]) steps.StepFunc[shipment] {
	return func(_ context.Context, s *steps.Context, st shipment) (steps.Outcome[shipment], error) {
		sig, err := s.Signal(delivered.Name())
		if err != nil {
			return steps.Outcome[shipment]{}, err
		}
		if sig == nil {
			return steps.AwaitSignal(delivered, time.Hour), nil
		}
		st.Delivered, st.By = sig.Data, sig.By
		return steps.Complete(st), nil
	}
}

func (h *harness) awaitSignal(id string) checkpoint.Run {
	h.t.Helper()
	return h.awaitSignalOf("shipping", id)
}

func (h *harness) awaitSignalOf(workflow, id string) checkpoint.Run {
	h.t.Helper()
	if _, _, err := h.client.Start(context.Background(), client.StartRequest{Workflow: workflow, RunID: id}); err != nil {
		h.t.Fatal(err)
	}
	return h.waitStatus(id, checkpoint.StatusWaiting)
}

// Acceptance (issue 15): POST /api/runs/{run}/signals/{name} with a Bearer
// token delivers a signal; bad requests are refused with 400/401/404/409
// and change nothing; the same id twice is delivered once.
func TestSignalThroughAPI(t *testing.T) {
	counted := &signalCounts{m: map[string]int{}}
	h := newHarness(t, "redis", func(c *approver.Config) { c.SignalMetrics = counted })
	before := h.awaitSignal("ship-a")
	tok := h.tokens["ana"]
	for _, tc := range []struct {
		path, token, body string
		status            int
		code, want        string
	}{
		{"/api/runs/ship-a/signals/delivered", "", `{}`, http.StatusUnauthorized, approver.CodeUnauthorized, "missing token"},
		{"/api/runs/ship-a/signals/delivered", "nope", `{}`, http.StatusUnauthorized, approver.CodeUnauthorized, "not recognised"},
		{"/api/runs/ship-a/signals/delivered", tok, `{bad`, http.StatusBadRequest, approver.CodeBadRequest, "malformed JSON"},
		{"/api/runs/ship-a/signals/delivered", tok, `{"data": 1, "extra": 2}`, http.StatusBadRequest, approver.CodeBadRequest, "malformed JSON"},
		{"/api/runs/ship-a/signals/delivered", tok, `{"id": "bad id"}`, http.StatusBadRequest, approver.CodeBadRequest, "signal id"},
		{"/api/runs/ship-a/signals/bad.name", tok, `{}`, http.StatusBadRequest, approver.CodeBadRequest, "signal name"},
		{"/api/runs/nope-1/signals/delivered", tok, `{}`, http.StatusNotFound, approver.CodeNotFound, "no run nope-1"},
		{"/api/runs/ship-a/signals/returned", tok, `{}`, http.StatusConflict, approver.CodeUnknownSignal, `not "returned"`},
		{"/api/runs/ship-a/signals/delivered", tok, `{"data": "` + strings.Repeat("x", 70_000) + `"}`, http.StatusRequestEntityTooLarge, approver.CodeTooLarge, "at most 65536"},
	} {
		status, _, body := h.do(http.MethodPost, tc.path, tc.token, tc.body, nil)
		var e approver.ErrorBody
		if status != tc.status || json.Unmarshal(body, &e) != nil || e.Code != tc.code || !strings.Contains(e.Error, tc.want) {
			t.Fatalf("POST %s %.40s: %d %s, want %d %s %q", tc.path, tc.body, status, body, tc.status, tc.code, tc.want)
		}
	}
	h.assertUnchanged(before)

	status, _, body := h.do(http.MethodPost, "/api/runs/ship-a/signals/delivered", tok, `{"data": {"pod": "J. Doe"}, "id": "carrier-1"}`, nil)
	var res approver.SignalResult
	if status != http.StatusOK || json.Unmarshal(body, &res) != nil || !res.Resumed || res.Duplicate || res.Signal.By != "ana" || res.Signal.Channel != client.ChannelAPI {
		t.Fatalf("signal: %d %s", status, body)
	}
	done := h.waitStatus("ship-a", checkpoint.StatusCompleted)
	var st shipment
	if err := json.Unmarshal(h.lastState("ship-a"), &st); err != nil || string(st.Delivered) != `{"pod":"J. Doe"}` || st.By != "ana" {
		t.Fatalf("state %+v (%v)", st, err)
	}
	if n := len(done.Consumed); n != 1 || done.Consumed[0].Step != 1 || done.Consumed[0].ID != "carrier-1" || len(done.Signals) != 0 {
		t.Fatalf("signals %+v, consumed %+v", done.Signals, done.Consumed)
	}
	status, _, body = h.do(http.MethodPost, "/api/runs/ship-a/signals/delivered", tok, `{"data": {"pod": "J. Doe"}, "id": "carrier-1"}`, nil)
	if status != http.StatusOK || json.Unmarshal(body, &res) != nil || !res.Duplicate {
		t.Fatalf("the same signal again: %d %s", status, body)
	}
	status, _, body = h.do(http.MethodPost, "/api/runs/ship-a/signals/delivered", tok, `{"id": "carrier-1"}`, nil)
	if status != http.StatusConflict || !strings.Contains(string(body), "with other data") {
		t.Fatalf("the same id with other data: %d %s", status, body)
	}
	status, _, body = h.do(http.MethodPost, "/api/runs/ship-a/signals/delivered", tok, ``, nil)
	if status != http.StatusConflict || !strings.Contains(string(body), "already ended") {
		t.Fatalf("signal to an ended run: %d %s", status, body)
	}
	// Refusals before the store is asked (token, body) are not signals taken.
	if want := map[string]int{"api/received": 1, "api/duplicate": 1, "api/refused": 6}; !reflect.DeepEqual(counted.snapshot(), want) {
		t.Fatalf("signals counted %v, want %v", counted.snapshot(), want)
	}
}

type signalCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *signalCounts) SignalReceived(channel, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[channel+"/"+outcome]++
}

func (c *signalCounts) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// Acceptance (issue 15): signed signal events on durable.signals.<system>
// are delivered once; unsigned, replayed or unknown ones are refused.
func TestSignalEvents(t *testing.T) {
	h := newHarness(t, "kv", nil)
	before := h.awaitSignal("ship-b")
	secret := eventSystems["erp"].Secret
	ev := approver.SignalEvent{ID: "erp-evt-9", System: "erp", RunID: "ship-b", Name: "delivered", Data: json.RawMessage(`{"at":"dock 4"}`), By: "carrier", TS: time.Now().UTC()}
	body, _ := json.Marshal(ev)
	subject := approver.SignalSubjectPrefix + "erp"
	if r := h.publishOn(subject, "", body); r.OK || r.Code != approver.RejectBadSignature {
		t.Fatalf("unsigned: %+v", r)
	}
	bogus := ev
	bogus.ID, bogus.Name = "erp-evt-10", "returned"
	bb, _ := json.Marshal(bogus)
	if r := h.publishOn(subject, secret, bb); r.OK || r.Code != approver.RejectUnknownSignal {
		t.Fatalf("unknown signal: %+v", r)
	}
	h.assertUnchanged(before)
	if r := h.publishOn(subject, secret, body); !r.OK {
		t.Fatalf("signed: %+v", r)
	}
	h.waitStatus("ship-b", checkpoint.StatusCompleted)
	var st shipment
	if err := json.Unmarshal(h.lastState("ship-b"), &st); err != nil || st.By != "erp:carrier" || string(st.Delivered) != `{"at":"dock 4"}` {
		t.Fatalf("state %+v (%v)", st, err)
	}
	if r := h.publishOn(subject, secret, body); r.OK || r.Code != approver.RejectReplayed {
		t.Fatalf("replay: %+v", r)
	}
}

func (h *harness) lastState(id string) json.RawMessage {
	h.t.Helper()
	cps, err := h.store.Checkpoints(context.Background(), id)
	if err != nil || len(cps) == 0 {
		h.t.Fatalf("checkpoints of %s: %d (%v)", id, len(cps), err)
	}
	return cps[len(cps)-1].State
}

// Issue 23 item 10: a workflow declares which token groups may send a
// signal (Workflow.Signal). A token outside them gets 403, logged with
// the caller, and the run is unchanged; a token of the groups, or of
// operators, is delivered; signed events keep their HMAC and no groups;
// a workflow record written before groups existed lets any token send.
func TestSignalGroups(t *testing.T) {
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) {
			counted := &signalCounts{m: map[string]int{}}
			h := newHarness(t, kind, func(c *approver.Config) { c.SignalMetrics = counted })
			send := func(run, who string) (int, []byte) {
				t.Helper()
				status, _, body := h.do(http.MethodPost, "/api/runs/"+run+"/signals/delivered", h.tokens[who], `{"data": {"pod": "`+who+`"}}`, nil)
				return status, body
			}

			before := h.awaitSignalOf("guarded", "guard-1")
			status, body := send("guard-1", "ana")
			var e approver.ErrorBody
			if status != http.StatusForbidden || json.Unmarshal(body, &e) != nil || e.Code != approver.CodeForbidden ||
				!strings.Contains(e.Error, "claims") || !strings.Contains(e.Error, "ana") {
				t.Fatalf("signal from ana (adjusters) to a signal of claims: %d %s, want 403 %s naming claims and ana", status, body, approver.CodeForbidden)
			}
			h.assertUnchanged(before)
			if logs := h.logs.String(); !strings.Contains(logs, `"status":403`) || !strings.Contains(logs, `"by":"ana"`) || !strings.Contains(logs, `"run_id":"guard-1"`) {
				t.Fatalf("the refusal is not logged with the caller:\n%s", logs)
			}
			if status, body := send("guard-1", "cy"); status != http.StatusOK {
				t.Fatalf("signal from cy (claims): %d %s", status, body)
			}
			h.waitStatus("guard-1", checkpoint.StatusCompleted)

			// Operators may send any signal, as they may cancel any run.
			h.awaitSignalOf("guarded", "guard-2")
			if status, body := send("guard-2", "ops"); status != http.StatusOK {
				t.Fatalf("signal from ops (operators): %d %s", status, body)
			}
			h.waitStatus("guard-2", checkpoint.StatusCompleted)

			// A signed event is not subject to groups: its HMAC is the check.
			h.awaitSignalOf("guarded", "guard-3")
			ev, _ := json.Marshal(approver.SignalEvent{ID: "erp-g3", System: "erp", RunID: "guard-3", Name: "delivered", By: "carrier", TS: time.Now().UTC()})
			if r := h.publishOn(approver.SignalSubjectPrefix+"erp", eventSystems["erp"].Secret, ev); !r.OK {
				t.Fatalf("signed event to a guarded signal: %+v", r)
			}
			h.waitStatus("guard-3", checkpoint.StatusCompleted)

			// The workflow as the previous code registered it (no groups):
			// any token may send, as before.
			var old checkpoint.WorkflowInfo
			if err := json.Unmarshal([]byte(`{"name":"guarded","version":1,"first_step":"await","steps":["await"],"signals":["delivered"],"updated_at":"2025-01-02T03:04:05Z"}`), &old); err != nil {
				t.Fatal(err)
			}
			if err := h.store.RegisterWorkflow(context.Background(), old); err != nil {
				t.Fatal(err)
			}
			h.awaitSignalOf("guarded", "guard-4")
			if status, body := send("guard-4", "ana"); status != http.StatusOK {
				t.Fatalf("signal from ana to a workflow registered without groups: %d %s", status, body)
			}
			h.waitStatus("guard-4", checkpoint.StatusCompleted)
			if want := map[string]int{"api/refused": 1, "api/received": 3, "event/received": 1}; !reflect.DeepEqual(counted.snapshot(), want) {
				t.Fatalf("signals counted %v, want %v", counted.snapshot(), want)
			}
		})
	}
}
