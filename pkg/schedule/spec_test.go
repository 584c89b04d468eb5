package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/schedule"
)

func TestValidate(t *testing.T) {
	ok := schedule.Spec{Name: "nightly", Workflow: "reconcile", Cron: "0 2 * * *"}
	tests := []struct {
		name string
		edit func(*schedule.Spec)
		want string // "" when valid; else the start of the error
	}{
		{"minimal", func(*schedule.Spec) {}, ""},
		{"everything", func(s *schedule.Spec) {
			s.TimeZone, s.Input, s.Overlap, s.CatchUp, s.CatchUpWindow = "Europe/Berlin", json.RawMessage(` {"a": [1, 2]} `), schedule.OverlapCancelPrevious, schedule.CatchUpAll, time.Hour
		}, ""},
		{"descriptor", func(s *schedule.Spec) { s.Cron = "@daily" }, ""},
		{"names", func(s *schedule.Spec) { s.Cron = "30 9 * JAN-MAR MON-FRI" }, ""},
		{"leap day", func(s *schedule.Spec) { s.Cron = "0 0 29 2 *" }, ""},
		{"longest name", func(s *schedule.Spec) { s.Name = strings.Repeat("n", schedule.MaxNameLen) }, ""},

		{"minute 61", func(s *schedule.Spec) { s.Cron = "61 * * * *" }, `cron expression "61 * * * *": end of range (61) above maximum (59)`},
		{"six fields", func(s *schedule.Spec) { s.Cron = "0 0 2 * * *" }, `cron expression "0 0 2 * * *": expected exactly 5 fields, found 6`},
		{"empty cron", func(s *schedule.Spec) { s.Cron = "" }, `cron expression "": empty spec string`},
		{"garbage", func(s *schedule.Spec) { s.Cron = "every day" }, `cron expression "every day": expected exactly 5 fields`},
		{"@every", func(s *schedule.Spec) { s.Cron = "@every 1h" }, `cron expression "@every 1h": @every is not supported`},
		{"TZ prefix", func(s *schedule.Spec) { s.Cron = "TZ=UTC" }, `cron expression "TZ=UTC": give the time zone as the schedule's time zone`},
		{"never", func(s *schedule.Spec) { s.Cron = "0 0 30 2 *" }, `cron expression "0 0 30 2 *": never fires`},
		{"unknown zone", func(s *schedule.Spec) { s.TimeZone = "Mars/Base" }, `time zone "Mars/Base": unknown`},
		{"local zone", func(s *schedule.Spec) { s.TimeZone = "Local" }, `time zone "Local": name the zone`},
		{"zone path", func(s *schedule.Spec) { s.TimeZone = "../../etc/passwd" }, `time zone "../../etc/passwd": unknown`},
		{"empty name", func(s *schedule.Spec) { s.Name = "" }, `schedule name "": use 1-100 letters`},
		{"dotted name", func(s *schedule.Spec) { s.Name = "night.ly" }, `schedule name "night.ly": use 1-100 letters`},
		{"long name", func(s *schedule.Spec) { s.Name = strings.Repeat("n", schedule.MaxNameLen+1) }, `schedule name "nnn`},
		{"bad workflow", func(s *schedule.Spec) { s.Workflow = "re concile" }, `workflow "re concile": a workflow name is`},
		{"overlap", func(s *schedule.Spec) { s.Overlap = "sometimes" }, `overlap policy "sometimes": use skip, allow or cancel-previous`},
		{"catch-up", func(s *schedule.Spec) { s.CatchUp = "first" }, `catch-up policy "first": use last or all`},
		{"short window", func(s *schedule.Spec) { s.CatchUpWindow = time.Second }, `catch-up window 1s: use 1m0s to 168h0m0s`},
		{"long window", func(s *schedule.Spec) { s.CatchUpWindow = 8 * 24 * time.Hour }, `catch-up window 192h0m0s: use 1m0s to 168h0m0s`},
		{"array input", func(s *schedule.Spec) { s.Input = json.RawMessage(`[1]`) }, `input "[1]": must be a JSON object`},
		{"null input", func(s *schedule.Spec) { s.Input = json.RawMessage(`null`) }, `input "null": must be a JSON object: null`},
		{"broken input", func(s *schedule.Spec) { s.Input = json.RawMessage(`{"a":`) }, `input "{\"a\":": must be a JSON object`},
		{"huge input", func(s *schedule.Spec) {
			s.Input = json.RawMessage(`{"a":"` + strings.Repeat("x", schedule.MaxInputBytes) + `"}`)
		}, `input of 65544 bytes: at most 65536`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want %q...", err, tt.want)
			}
			if !errors.Is(err, schedule.ErrBadSpec) {
				t.Errorf("%v is not ErrBadSpec", err)
			}
		})
	}
}

// The JSON form (what the store keeps, and a CLI prints) has the window
// as a Go duration, and reads back the same.
func TestSpecJSON(t *testing.T) {
	s := schedule.Spec{Name: "n", Workflow: "w", Cron: "@hourly", CatchUpWindow: 90 * time.Minute, Input: json.RawMessage(`{"a":1}`), Paused: true}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"name":"n","workflow":"w","cron":"@hourly","input":{"a":1},"paused":true,"catch_up_window":"1h30m0s"}`
	if string(b) != want {
		t.Errorf("JSON %s\nwant %s", b, want)
	}
	var back schedule.Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.CatchUpWindow != s.CatchUpWindow || back.Name != s.Name || !back.Paused || string(back.Input) != `{"a":1}` {
		t.Errorf("read back %+v", back)
	}
	if err := json.Unmarshal([]byte(`{"catch_up_window":"soon"}`), &back); !errors.Is(err, schedule.ErrBadSpec) {
		t.Errorf("bad window: %v", err)
	}
}
