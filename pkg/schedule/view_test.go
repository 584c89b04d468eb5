package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/schedule"
)

func TestDecodeSpec(t *testing.T) {
	tests := []struct {
		name, in string
		want     schedule.Spec
		err      string // the start of the error; "" when decoded
	}{
		{"every field", `{"name": "nightly", "workflow": "reconcile", "cron": "0 2 * * *", "time_zone": "Europe/Berlin",
			"input": {"full": true}, "overlap": "allow", "catch_up": "all", "catch_up_window": "1h", "paused": true}`,
			schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Input: json.RawMessage(`{"full": true}`),
				Overlap: schedule.OverlapAllow, CatchUp: schedule.CatchUpAll, CatchUpWindow: time.Hour, Paused: true}, ""},
		{"misspelt zone", `{"name": "n", "workflow": "w", "cron": "@daily", "tz": "Europe/Berlin"}`, schedule.Spec{}, `spec field "tz": unknown`},
		{"not an object", `[1]`, schedule.Spec{}, `spec "[1]": want a JSON object`},
		{"null", `null`, schedule.Spec{}, `spec "null": want a JSON object`},
		{"wrong type", `{"name": 5}`, schedule.Spec{}, `spec: json: cannot unmarshal number`},
		{"bad window", `{"catch_up_window": "a day"}`, schedule.Spec{}, `catch-up window "a day"`},
		{"trailing", `{"name": "n"} {}`, schedule.Spec{}, `spec: trailing data`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schedule.DecodeSpec([]byte(tt.in))
			if tt.err != "" {
				if !errors.Is(err, schedule.ErrBadSpec) || !strings.HasPrefix(err.Error(), tt.err) {
					t.Fatalf("DecodeSpec(%s): %v, want ErrBadSpec starting %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tt.want)
			if string(g) != string(w) {
				t.Fatalf("DecodeSpec: %s, want %s", g, w)
			}
		})
	}
}

// A view is the schedule's JSON with its next fire beside it; a paused
// schedule has none.
func TestViewAt(t *testing.T) {
	now := time.Date(2026, 12, 4, 1, 30, 0, 0, time.UTC)
	sc := schedule.Schedule{Spec: schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *", TimeZone: "UTC"}, ActiveSince: now}
	b, err := json.Marshal(sc.ViewAt(now))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v["next_fire"] != "2026-12-04T02:00:00Z" || v["spec"].(map[string]any)["cron"] != "0 2 * * *" || v["state"] == nil {
		t.Errorf("view %s", b)
	}
	sc.Spec.Paused = true
	if b, _ := json.Marshal(sc.ViewAt(now)); strings.Contains(string(b), "next_fire") {
		t.Errorf("paused view %s has a next fire", b)
	}
}
