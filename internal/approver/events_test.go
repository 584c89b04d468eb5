package approver_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

func eventBody(t *testing.T, ev approver.Event) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSignedEventApproves(t *testing.T) {
	h := newHarness(t, "redis", nil)
	run := h.park("claim-ev", "ana", "adjusters")
	ev := approver.Event{
		ID: "evt-1", System: "erp", RunID: "claim-ev", Step: 1, PayloadSHA256: run.Wait.PayloadSHA256,
		Decision: checkpoint.DecisionApproved, By: "olga", Reason: "approved in ERP", TS: time.Now().UTC(),
	}
	body := eventBody(t, ev)
	if r := h.publishEvent("erp", eventSystems["erp"].Secret, body); !r.OK || r.Error != "" {
		t.Fatalf("reply %+v", r)
	}
	done := h.waitStatus("claim-ev", checkpoint.StatusCompleted)
	if len(done.Approvals) != 1 {
		t.Fatalf("approvals %+v", done.Approvals)
	}
	a := done.Approvals[0]
	if a.By != "erp:olga" || a.Channel != client.ChannelEvent || a.Decision != checkpoint.DecisionApproved || a.PayloadSHA256 != run.Wait.PayloadSHA256 ||
		string(a.Payload) != string(run.Wait.Payload) || a.Reason != "approved in ERP" || a.Step != 1 {
		t.Fatalf("approval %+v", a)
	}
	// The very same event again: a replay.
	if r := h.publishEvent("erp", eventSystems["erp"].Secret, body); r.OK || r.Code != approver.RejectReplayed {
		t.Fatalf("replay: %+v", r)
	}
	if st := h.srv.Stats(); st.Accepted != 1 || st.Rejected[approver.RejectReplayed] != 1 {
		t.Fatalf("stats %+v", st)
	}

	// An event published without a reply subject is decided too.
	rej := h.park("claim-ev2", "", "claims")
	ev2 := approver.Event{
		ID: "evt-2", System: "crm", RunID: "claim-ev2", Step: 1, PayloadSHA256: rej.Wait.PayloadSHA256,
		Decision: checkpoint.DecisionRejected, By: "max", TS: time.Now().UTC(),
	}
	b2 := eventBody(t, ev2)
	msg := nats.NewMsg(approver.EventSubjectPrefix + "crm")
	msg.Data = b2
	msg.Header.Set(approver.SignatureHeader, approver.Sign(eventSystems["crm"].Secret, b2))
	if err := h.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	failed := h.waitStatus("claim-ev2", checkpoint.StatusFailed)
	if failed.Error != "rejected by crm:max" || failed.Approvals[0].Channel != client.ChannelEvent {
		t.Fatalf("rejected run %+v", failed)
	}
	testenv.Eventually(t, 5*time.Second, "two accepted events", func() bool { return h.srv.Stats().Accepted == 2 })
}

func TestBadEventsAreRejected(t *testing.T) {
	h := newHarness(t, "redis", nil)
	run := h.park("claim-x", "", "adjusters")
	sha := run.Wait.PayloadSHA256
	erp := eventSystems["erp"].Secret
	crm := eventSystems["crm"].Secret

	done := h.park("claim-done", "", "adjusters")
	if _, err := h.client.Decide(t.Context(), client.Decision{RunID: "claim-done", By: "op", Channel: client.ChannelCLI}); err != nil {
		t.Fatal(err)
	}
	done = h.waitStatus("claim-done", checkpoint.StatusCompleted)

	ids := 0
	good := func(mod func(*approver.Event)) approver.Event {
		ids++
		ev := approver.Event{
			ID: "bad-" + string(rune('a'+ids)), System: "erp", RunID: "claim-x", Step: 1, PayloadSHA256: sha,
			Decision: checkpoint.DecisionApproved, By: "olga", TS: time.Now().UTC(),
		}
		if mod != nil {
			mod(&ev)
		}
		return ev
	}
	// An event rejected for its hash uses its id up: sent again with the
	// right hash, the same id is a replay.
	used := good(func(e *approver.Event) { e.ID = "used-once"; e.PayloadSHA256 = strings.Repeat("ab", 32) })
	if r := h.publishEvent("erp", erp, eventBody(t, used)); r.Code != approver.RejectStaleHash {
		t.Fatalf("first use: %+v", r)
	}
	used.PayloadSHA256 = sha

	for _, tc := range []struct {
		name    string
		subject string
		secret  string
		body    []byte
		reason  string
		run     checkpoint.Run
	}{
		{"bad signature", "erp", crm, eventBody(t, good(nil)), approver.RejectBadSignature, run},
		{"missing signature", "erp", "", eventBody(t, good(nil)), approver.RejectBadSignature, run},
		{"signature of another body", "erp", "", nil, approver.RejectBadSignature, run},
		{"unknown system", "nope", erp, eventBody(t, good(func(e *approver.Event) { e.System = "nope" })), approver.RejectUnknownSystem, run},
		{"subject and body disagree", "crm", crm, eventBody(t, good(nil)), approver.RejectSystemMismatch, run},
		{"replayed id", "erp", erp, eventBody(t, used), approver.RejectReplayed, run},
		{"stale ts", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.TS = time.Now().Add(-6 * time.Minute) })), approver.RejectStale, run},
		{"ts in the future", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.TS = time.Now().Add(2 * time.Minute) })), approver.RejectFuture, run},
		{"malformed JSON", "erp", erp, []byte(`{"id": "m-1", "run_id": `), approver.RejectMalformed, run},
		{"missing fields", "erp", erp, []byte(`{"id": "m-2", "system": "erp", "run_id": "claim-x"}`), approver.RejectMalformed, run},
		{"unknown decision", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.Decision = "maybe" })), approver.RejectMalformed, run},
		{"wrong hash", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.PayloadSHA256 = strings.Repeat("cd", 32) })), approver.RejectStaleHash, run},
		{"wrong step", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.Step = 3 })), approver.RejectWrongStep, run},
		{"group not allowed", "crm", crm, eventBody(t, good(func(e *approver.Event) { e.System = "crm" })), approver.RejectForbidden, run},
		{"group not allowed, wrong hash and step too", "crm", crm, eventBody(t, good(func(e *approver.Event) { e.System = "crm"; e.Step = 2; e.PayloadSHA256 = strings.Repeat("ef", 32) })), approver.RejectForbidden, run},
		{"unknown run", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.RunID = "claim-nope" })), approver.RejectNotFound, run},
		{"run not waiting", "erp", erp, eventBody(t, good(func(e *approver.Event) { e.RunID = "claim-done"; e.PayloadSHA256 = done.Approvals[0].PayloadSHA256 })), approver.RejectNotWaiting, done},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run = h.run(tc.run.ID) // refusals earlier in the table were audited
			before := maps.Clone(h.srv.Stats().Rejected)
			var r approver.EventReply
			if tc.body == nil { // signed, then changed
				body := eventBody(t, good(nil))
				msg := nats.NewMsg(approver.EventSubjectPrefix + tc.subject)
				msg.Data = []byte(strings.Replace(string(body), "olga", "eve", 1))
				msg.Header.Set(approver.SignatureHeader, approver.Sign(erp, body))
				reply, err := h.nc.RequestMsg(msg, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(reply.Data, &r); err != nil {
					t.Fatal(err)
				}
			} else {
				r = h.publishEvent(tc.subject, tc.secret, tc.body)
			}
			if r.OK || r.Code != tc.reason || r.Error == "" {
				t.Fatalf("reply %+v, want code %s", r, tc.reason)
			}
			if strings.Contains(r.Error, sha) {
				t.Errorf("the reply names the pending hash: %s", r.Error)
			}
			st := h.srv.Stats()
			if st.Accepted != 0 || st.Rejected[tc.reason] != before[tc.reason]+1 {
				t.Errorf("stats %+v (before %+v)", st, before)
			}
			switch tc.reason {
			case approver.RejectStaleHash, approver.RejectWrongStep, approver.RejectForbidden, approver.RejectNotWaiting:
				// Signed by a known system: the refusal is audited on the run.
				h.assertRefusalAudited(tc.run, tc.reason)
			default:
				h.assertUnchanged(tc.run)
			}
		})
	}
	if st := h.srv.Stats(); st.Accepted != 0 {
		t.Fatalf("stats %+v", st)
	}
	// And a good event still goes through.
	if r := h.publishEvent("erp", erp, eventBody(t, good(nil))); !r.OK {
		t.Fatalf("good event: %+v", r)
	}
	h.waitStatus("claim-x", checkpoint.StatusCompleted)
}

func TestLoadEventSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := writeFile(p, body); err != nil {
			t.Fatal(err)
		}
		return p
	}
	m, err := approver.LoadEventSecrets(write("ok.json", `{"erp": {"secret": "0123456789abcdef0123", "groups": ["adjusters"]}}`))
	if err != nil || m["erp"].Secret != "0123456789abcdef0123" || m["erp"].Groups[0] != "adjusters" {
		t.Fatalf("%+v %v", m, err)
	}
	for name, body := range map[string]string{
		"not json":     `{"erp": `,
		"short secret": `{"erp": {"secret": "x", "groups": ["adjusters"]}}`,
		"no groups":    `{"erp": {"secret": "0123456789abcdef0123"}}`,
		"bad name":     `{"erp.eu": {"secret": "0123456789abcdef0123", "groups": ["g"]}}`,
		"typo":         `{"erp": {"secrte": "0123456789abcdef0123", "groups": ["g"]}}`,
	} {
		if _, err := approver.LoadEventSecrets(write(strings.ReplaceAll(name, " ", "-")+".json", body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
