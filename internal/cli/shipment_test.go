package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// Acceptance (issue 15): shipment through the CLI alone. The run waits
// for the signal "delivered" holding no worker; bad signals are refused
// with a clear error and change nothing; the signal resumes it and its
// data is kept; a repeated signal id changes nothing; a signal sent
// before the wait is kept and consumed by it; a wait past its TTL fails
// the run with the reason. Every signal is audited and shown.
func TestShipmentThroughCLI(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		e.mustCLI(0, "start", "shipment", "--id", "ship-1")
		parked := e.waitStatus("ship-1", checkpoint.StatusWaiting)
		if parked.Wait == nil || parked.Wait.Kind != checkpoint.WaitSignal || parked.Wait.Name != "delivered" || parked.Wait.Deadline.Sub(parked.Wait.Since) != 72*time.Hour {
			t.Fatalf("wait %+v", parked.Wait)
		}
		before, beforeCPs := e.mustRun("ship-1"), e.checkpoints("ship-1")
		for _, tc := range []struct {
			code int
			args []string
			want string
		}{
			{2, []string{"signal", "ship-1", "delivered", "--data", "{bad"}, "not valid JSON"},
			{2, []string{"signal", "ship-1"}, "RUN and NAME"},
			{3, []string{"signal", "nope-1", "delivered"}, "not found"},
			{2, []string{"signal", "ship-1", "bogus"}, `waits for signals [delivered], not "bogus"`},
			{2, []string{"signal", "ship-1", "bad.name"}, "signal name"},
			{2, []string{"signal", "ship-1", "delivered", "--data", `"` + strings.Repeat("x", 70_000) + `"`}, "at most 65536"},
			{2, []string{"signal", "ship-1", "delivered", "--id", "bad id"}, "signal id"},
			{1, []string{"approve", "ship-1", "--by", "ana"}, "waits for its signal, not an approval"},
		} {
			r := e.mustCLI(tc.code, tc.args...)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("%v: stderr %q, want %q", tc.args, r.stderr, tc.want)
			}
		}
		e.assertUnchanged("ship-1", before, beforeCPs)

		r := e.mustCLI(0, "signal", "ship-1", "delivered", "--data", `{"pod": "signed by J. Doe"}`, "--id", "carrier-77", "--by", "carrier")
		if !strings.Contains(r.stdout, "resumes at step 1") {
			t.Fatalf("signal: %s", r.stdout)
		}
		done := e.waitStatus("ship-1", checkpoint.StatusCompleted)
		// stats counts a signal's resume with the approvals', and says so
		// (issue 25: it called them all "approval resumes").
		if st := statsJSON(t, e); st.Resumes.ApprovalResumes != 1 || st.Resumes.CompletedRuns != 1 {
			t.Fatalf("stats resumes %+v, want the signal's resume of the one completed run", st.Resumes)
		}
		if out := e.mustCLI(0, "stats").stdout; !strings.Contains(out, "1.000 resumes (approvals and signals) per completed run") || strings.Contains(out, "approval resumes") {
			t.Fatalf("stats names the signal's resume wrong:\n%s", out)
		}
		v := e.showJSON("ship-1")
		state, _ := v["state"].(map[string]any)
		delivered, _ := state["delivered"].(map[string]any)
		if delivered["pod"] != "signed by J. Doe" || state["delivered_by"] != "carrier" {
			t.Fatalf("state %v", state)
		}
		if r := e.mustCLI(0, "signal", "ship-1", "delivered", "--data", `{"pod":"signed by J. Doe"}`, "--id", "carrier-77"); !strings.Contains(r.stdout, "nothing changed") {
			t.Fatalf("repeated signal: %s", r.stdout)
		}
		if r := e.mustCLI(1, "signal", "ship-1", "delivered", "--data", `{"pod": "someone else"}`, "--id", "carrier-77"); !strings.Contains(r.stderr, "with other data") {
			t.Fatalf("a signal id reused with other data: %s", r.stderr)
		}
		if r := e.mustCLI(1, "signal", "ship-1", "delivered"); !strings.Contains(r.stderr, "already ended") {
			t.Fatalf("signal after the end: %s", r.stderr)
		}
		if kinds := auditKinds(done); !strings.Contains(kinds, "parked,signal") {
			t.Fatalf("audit %s", kinds)
		}
		text := e.mustCLI(0, "runs", "show", "ship-1").stdout
		if !strings.Contains(text, "SIGNALS") || !strings.Contains(text, "delivered (id carrier-77) by carrier via cli") || !strings.Contains(text, "consumed by step 1") {
			t.Fatalf("runs show:\n%s", text)
		}

		// A signal that comes before the wait is kept and consumed by it:
		// the run exists, its first step has not run yet.
		ctx := context.Background()
		now := time.Now().UTC()
		if _, err := e.store.CreateRun(ctx, checkpoint.Run{ID: "ship-2", Workflow: "shipment", Version: 1, Status: checkpoint.StatusRunning,
			Step: 1, StepName: "await-delivery", Input: json.RawMessage(`{}`), CreatedAt: now, UpdatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if r := e.mustCLI(0, "signal", "ship-2", "delivered", "--data", `{"early": true}`); !strings.Contains(r.stdout, "kept until a step waits for it") {
			t.Fatalf("early signal: %s", r.stdout)
		}
		e.mustCLI(0, "start", "shipment", "--id", "ship-2") // publishes the first step again
		early := e.waitStatus("ship-2", checkpoint.StatusCompleted)
		if kinds := auditKinds(early); strings.Contains(kinds, "parked") {
			t.Fatalf("ship-2 parked although its signal was there: %s", kinds)
		}

		// A wait past its TTL fails the run with the reason.
		e.mustCLI(0, "start", "shipment", "--id", "ship-3", "--input", `{"ttl": "1s"}`)
		e.waitStatus("ship-3", checkpoint.StatusWaiting)
		cl := client.New(e.js, e.store)
		if res, err := cl.Expire(ctx, "ship-3", time.Now().Add(2*time.Second)); err != nil || res.Action != client.ExpireSignal {
			t.Fatalf("expire: %+v, %v", res, err)
		}
		if failed := e.waitStatus("ship-3", checkpoint.StatusFailed); !strings.Contains(failed.Error, "no delivered signal within 1s") {
			t.Fatalf("ship-3: %q", failed.Error)
		}
	})
}
