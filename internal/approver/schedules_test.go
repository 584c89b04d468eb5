package approver_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/schedule"
)

func TestSchedulesAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("needs nats-server and redis-server")
	}
	for _, kind := range []string{"redis", "kv"} {
		t.Run(kind, func(t *testing.T) { testSchedulesAPI(t, kind) })
	}
}

// triggerIDRE is the id of a trigger's run: the schedule's name and the
// trigger's time to the second, in UTC (never a fire's, which has none).
var triggerIDRE = regexp.MustCompile(`^nightly-\d{8}T\d{6}Z$`)

const nightly = `{"name": "nightly", "workflow": "approval", "cron": "0 2 * * *", "time_zone": "Europe/Berlin", "input": {"group": "adjusters"}}`

func testSchedulesAPI(t *testing.T, kind string) {
	h := newHarness(t, kind, nil)
	testScheduleRefusals(t, h)

	// Create: the stored spec with its defaults, who made it, the next fire.
	ops := h.tokens["ops"]
	var created approver.ScheduleCreated
	h.call("POST", "/api/schedules", ops, nightly, 201, &created)
	if created.Spec.Name != "nightly" || created.Spec.TimeZone != "Europe/Berlin" || created.Spec.Overlap != schedule.OverlapSkip ||
		created.CreatedBy != "ops" || created.NextFire.IsZero() || created.Warning != "" || created.Spec.Paused {
		t.Errorf("created %+v", created)
	}
	if loc, _ := time.LoadLocation("Europe/Berlin"); created.NextFire.In(loc).Hour() != 2 {
		t.Errorf("next fire %s, want 02:00 in Berlin", created.NextFire)
	}
	// A duplicate is refused and changes nothing.
	if eb := h.refusal("POST", "/api/schedules", ops, strings.Replace(nightly, "0 2 * * *", "0 3 * * *", 1), 409, approver.CodeExists); !strings.Contains(eb.Error, "nightly") {
		t.Errorf("duplicate: %q does not name the schedule", eb.Error)
	}
	var got schedule.View
	h.call("GET", "/api/schedules/nightly", ops, "", 200, &got)
	if got.Spec.Cron != "0 2 * * *" || !got.UpdatedAt.Equal(created.UpdatedAt) {
		t.Errorf("after the duplicate: %+v", got)
	}

	// A workflow no worker has registered: kept, with the CLI's warning.
	var later approver.ScheduleCreated
	h.call("POST", "/api/schedules", ops, `{"name": "later", "workflow": "reconcile", "cron": "@daily"}`, 201, &later)
	if !strings.Contains(later.Warning, `no worker has registered workflow "reconcile"`) {
		t.Errorf("no warning for an unregistered workflow: %+v", later)
	}
	var deleted map[string]string
	h.call("DELETE", "/api/schedules/later", ops, "", 200, &deleted)
	if deleted["deleted"] != "later" {
		t.Errorf("delete answered %v", deleted)
	}
	h.refusal("GET", "/api/schedules/later", ops, "", 404, approver.CodeNotFound)

	testScheduleTrigger(t, h)
	testSchedulePause(t, h)
}

// A full store (StoreOptions.MaxSchedules) is refused with its own 409
// too_many naming the bound, not as a name taken (issue 27: it answered
// 409 exists); a name taken is still exists.
func TestSchedulesAPIFullStore(t *testing.T) {
	if testing.Short() {
		t.Skip("needs nats-server and redis-server")
	}
	h := newHarness(t, "kv", func(c *approver.Config) {
		js, err := jetstream.New(c.NATS)
		if err != nil {
			t.Fatal(err)
		}
		if c.Schedules, err = schedule.NewStore(t.Context(), js, schedule.StoreOptions{MaxSchedules: 1}); err != nil {
			t.Fatal(err)
		}
	})
	ops := h.tokens["ops"]
	var created approver.ScheduleCreated
	h.call("POST", "/api/schedules", ops, nightly, 201, &created)
	other := strings.Replace(nightly, `"nightly"`, `"hourly"`, 1)
	if eb := h.refusal("POST", "/api/schedules", ops, other, 409, approver.CodeTooMany); !strings.Contains(eb.Error, "at most 1") || !strings.Contains(eb.Error, "hourly") {
		t.Errorf("full store: %q, want the bound (at most 1) and the schedule named", eb.Error)
	}
	h.refusal("GET", "/api/schedules/hourly", ops, "", 404, approver.CodeNotFound)
	// Room again once one is deleted.
	var deleted map[string]string
	h.call("DELETE", "/api/schedules/nightly", ops, "", 200, &deleted)
	h.call("POST", "/api/schedules", ops, other, 201, &created)
}

// testScheduleRefusals: no token, a token outside operators, bad specs
// (the message of the CLI's exit 2), unknown names and actions. None
// stores anything.
func testScheduleRefusals(t *testing.T, h *harness) {
	ops, ana := h.tokens["ops"], h.tokens["ana"]
	for _, c := range []struct {
		method, path, token, body string
		status                    int
		code                      string
		names                     string // in the message
	}{
		{"GET", "/api/schedules", "", "", 401, approver.CodeUnauthorized, ""},
		{"GET", "/api/schedules", ana, "", 403, approver.CodeForbidden, "operators"},
		{"POST", "/api/schedules", ana, nightly, 403, approver.CodeForbidden, "operators"},
		{"GET", "/api/schedules/nightly", ana, "", 403, approver.CodeForbidden, ""},
		{"DELETE", "/api/schedules/nightly", "", "", 401, approver.CodeUnauthorized, ""},
		{"POST", "/api/schedules/nightly/trigger", "", "", 401, approver.CodeUnauthorized, ""},
		{"POST", "/api/schedules/nightly/pause", ana, "", 403, approver.CodeForbidden, ""},
		{"POST", "/api/schedules", ops, strings.Replace(nightly, "0 2 * * *", "61 * * * *", 1), 400, approver.CodeBadRequest,
			`cron expression "61 * * * *": end of range (61) above maximum (59)`},
		{"POST", "/api/schedules", ops, strings.Replace(nightly, "Europe/Berlin", "Mars/Base", 1), 400, approver.CodeBadRequest, `time zone "Mars/Base": unknown`},
		{"POST", "/api/schedules", ops, strings.Replace(nightly, "time_zone", "tz", 1), 400, approver.CodeBadRequest, `spec field "tz": unknown`},
		{"POST", "/api/schedules", ops, strings.Replace(nightly, `"approval"`, `"a.b"`, 1), 400, approver.CodeBadRequest, `workflow "a.b"`},
		{"POST", "/api/schedules", ops, `{"name": "nightly", "workflow": "approval", "cron": "@daily", "overlap": "sometimes"}`, 400, approver.CodeBadRequest, `overlap policy "sometimes"`},
		{"POST", "/api/schedules", ops, `{"name": "nightly",`, 400, approver.CodeBadRequest, "want a JSON object"},
		{"POST", "/api/schedules", ops, "", 400, approver.CodeBadRequest, "want a JSON object"},
		{"GET", "/api/schedules/nightly", ops, "", 404, approver.CodeNotFound, "nightly"},
		{"GET", "/api/schedules/night.ly", ops, "", 404, approver.CodeNotFound, "night.ly"},
		{"POST", "/api/schedules/nightly/trigger", ops, "", 404, approver.CodeNotFound, "nightly"},
		{"POST", "/api/schedules/nightly/pause", ops, "", 404, approver.CodeNotFound, "nightly"},
		{"POST", "/api/schedules/nightly/resume", ops, "", 404, approver.CodeNotFound, "nightly"},
		{"DELETE", "/api/schedules/nightly", ops, "", 404, approver.CodeNotFound, "nightly"},
		{"POST", "/api/schedules/nightly/delete", ops, "", 404, approver.CodeNotFound, "DELETE /api/schedules/{name}"},
		{"POST", "/api/schedules/nightly/frobnicate", ops, "", 404, approver.CodeNotFound, "frobnicate"},
		{"PUT", "/api/schedules", ops, nightly, 405, approver.CodeMethodNotAllowed, "GET or POST"},
		{"POST", "/api/schedules/nightly", ops, "", 405, approver.CodeMethodNotAllowed, "DELETE or GET"},
	} {
		if eb := h.refusal(c.method, c.path, c.token, c.body, c.status, c.code); !strings.Contains(eb.Error, c.names) {
			t.Errorf("%s %s: %q does not say %q", c.method, c.path, eb.Error, c.names)
		}
	}
	// The 400s say what the CLI says (its exit 2): the spec's own message.
	bad := schedule.Spec{Name: "nightly", Workflow: "approval", Cron: "61 * * * *"}
	if eb := h.refusal("POST", "/api/schedules", ops, `{"name": "nightly", "workflow": "approval", "cron": "61 * * * *"}`, 400, approver.CodeBadRequest); eb.Error != bad.Validate().Error() {
		t.Errorf("bad cron: %q, want the CLI's %q", eb.Error, bad.Validate())
	}
	var list approver.Schedules
	h.call("GET", "/api/schedules", ops, "", 200, &list)
	if list.Schedules == nil || len(list.Schedules) != 0 {
		t.Fatalf("after the refusals: %+v, want no schedule (and [], not null)", list)
	}
}

// testScheduleTrigger: a trigger starts a run whose id has the trigger's
// form, shown as the schedule's last fire; while it waits, the next
// trigger is skipped (overlap skip).
func testScheduleTrigger(t *testing.T, h *harness) {
	ops := h.tokens["ops"]
	var fire schedule.Fire
	h.call("POST", "/api/schedules/nightly/trigger", ops, "", 200, &fire)
	if fire.Result != schedule.Started || !fire.Trigger || !triggerIDRE.MatchString(fire.RunID) || fire.By != "ops" {
		t.Fatalf("trigger: %+v, want a started run with id like nightly-20261204T020000Z, by ops", fire)
	}
	// Started by the token's identity, as a four-eyes approver sees it.
	run := h.waitStatus(fire.RunID, checkpoint.StatusWaiting)
	if run.Workflow != "approval" || run.StartedBy != "ops" {
		t.Errorf("the trigger's run: workflow %s, started by %s, want ops", run.Workflow, run.StartedBy)
	}
	var list approver.Schedules
	h.call("GET", "/api/schedules", ops, "", 200, &list)
	if len(list.Schedules) != 1 || list.Schedules[0].State.Last == nil || list.Schedules[0].State.Last.RunID != fire.RunID ||
		list.Schedules[0].State.Last.By != "ops" || list.Schedules[0].State.LastRunID != fire.RunID || list.Schedules[0].NextFire.IsZero() {
		t.Fatalf("list after the trigger: %+v", list)
	}
	// A trigger in the same second is the same run; the next second's is
	// skipped while that one waits.
	var next schedule.Fire
	testenv.Eventually(t, 5*time.Second, "a trigger in another second", func() bool {
		h.call("POST", "/api/schedules/nightly/trigger", ops, "", 200, &next)
		return next.RunID != fire.RunID
	})
	if next.Result != schedule.Skipped || !strings.Contains(next.Reason, fire.RunID) || !triggerIDRE.MatchString(next.RunID) || next.By != "ops" {
		t.Errorf("second trigger: %+v, want skipped for %s", next, fire.RunID)
	}
	if _, err := h.store.GetRun(t.Context(), next.RunID); err == nil {
		t.Errorf("the skipped trigger started run %s", next.RunID)
	}
}

// testSchedulePause: pause and resume, by the token's identity; a paused
// schedule has no next fire; pausing twice changes nothing.
func testSchedulePause(t *testing.T, h *harness) {
	ops := h.tokens["ops"]
	var v schedule.View
	h.call("POST", "/api/schedules/nightly/pause", ops, "", 200, &v)
	if !v.Spec.Paused || !v.NextFire.IsZero() || v.UpdatedBy != "ops" {
		t.Errorf("paused: %+v", v)
	}
	var again schedule.View
	h.call("POST", "/api/schedules/nightly/pause", ops, "", 200, &again)
	if !again.UpdatedAt.Equal(v.UpdatedAt) {
		t.Errorf("a second pause changed the schedule: %s, then %s", v.UpdatedAt, again.UpdatedAt)
	}
	h.call("POST", "/api/schedules/nightly/resume", ops, "", 200, &v)
	if v.Spec.Paused || v.NextFire.IsZero() {
		t.Errorf("resumed: %+v", v)
	}
}

// call sends a request and decodes the answer into out, failing unless
// its status is want.
func (h *harness) call(method, path, token, body string, want int, out any) {
	h.t.Helper()
	status, _, b := h.do(method, path, token, body, nil)
	if status != want {
		h.t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
	}
	if err := json.Unmarshal(b, out); err != nil {
		h.t.Fatalf("%s %s: %v\n%s", method, path, err, b)
	}
}

// refusal sends a request that must be refused with status and code, and
// returns the error body.
func (h *harness) refusal(method, path, token, body string, status int, code string) approver.ErrorBody {
	h.t.Helper()
	got, _, b := h.do(method, path, token, body, nil)
	var eb approver.ErrorBody
	if got != status || json.Unmarshal(b, &eb) != nil || eb.Code != code || eb.Error == "" {
		h.t.Errorf("%s %s: %d %s, want %d %s", method, path, got, b, status, code)
	}
	return eb
}
