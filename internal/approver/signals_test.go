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

// signalFlow waits for the signal "delivered" and completes with its data.
func signalFlow() *steps.Workflow[shipment] {
	return steps.New[shipment]("shipping", 1).
		Signals("delivered").
		Step("await", func(_ context.Context, s *steps.Context, st shipment) (steps.Outcome[shipment], error) {
			sig, err := s.Signal("delivered")
			if err != nil {
				return steps.Outcome[shipment]{}, err
			}
			if sig == nil {
				return steps.AwaitSignal[shipment]("delivered", time.Hour), nil
			}
			st.Delivered, st.By = sig.Data, sig.By
			return steps.Complete(st), nil
		})
}

func (h *harness) awaitSignal(id string) checkpoint.Run {
	h.t.Helper()
	if _, _, err := h.client.Start(context.Background(), client.StartRequest{Workflow: "shipping", RunID: id}); err != nil {
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
