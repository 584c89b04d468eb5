package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Acceptance (issue 15): claims-batch through the CLI alone. It starts N
// child claims <run>-1 … <run>-N, waits for them holding no worker (each
// waits for its adjuster), and keeps what they paid; `runs show` links
// parent and children both ways; the parent is no approval to decide;
// cancelling a parent cancels its children.
func TestClaimsBatchThroughCLI(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const n = 3
		e.mustCLI(0, "start", "claims-batch", "--id", "batch-1", "--input", fmt.Sprintf(`{"count": %d}`, n))
		for i := 1; i <= n; i++ {
			e.waitStatus(fmt.Sprintf("batch-1-%d", i), checkpoint.StatusWaiting)
		}
		parent := e.waitStatus("batch-1", checkpoint.StatusWaiting)
		if parent.Wait == nil || parent.Wait.Kind != checkpoint.WaitChildren || parent.Step != 2 {
			t.Fatalf("parent waits for %+v at step %d", parent.Wait, parent.Step)
		}
		// runs show says what the parent waits for, and how its children
		// stand, not only "run waiting" (issue 25).
		text := e.mustCLI(0, "runs", "show", "batch-1").stdout
		for _, want := range []string{"for its 3 child runs to end, now 3 waiting (step 2 collect runs then)", "run waiting for 3 child runs: 3 waiting"} {
			if !strings.Contains(text, want) {
				t.Fatalf("runs show of the waiting parent lacks %q:\n%s", want, text)
			}
		}
		if r := e.mustCLI(1, "approve", "batch-1", "--by", "ana"); !strings.Contains(r.stderr, "waits for its child runs, not an approval") {
			t.Fatalf("approve of the parent: %s", r.stderr)
		}
		// A child id taken by a stranger would not be adopted: starting
		// one of the children by hand under another input is refused.
		e.mustCLI(1, "start", "claim", "--id", "batch-1-1", "--input", `{"amount": 5}`)

		for i := 1; i <= n; i++ {
			e.mustCLI(0, "approve", fmt.Sprintf("batch-1-%d", i), "--by", "ana")
		}
		done := e.waitStatus("batch-1", checkpoint.StatusCompleted)
		v := e.showJSON("batch-1")
		state, _ := v["state"].(map[string]any)
		if state["paid"] != float64(n*1840) {
			t.Fatalf("batch state %v, want paid %d", state, n*1840)
		}
		children, _ := v["children"].([]any)
		if len(children) != n {
			t.Fatalf("runs show lists %d children, want %d", len(children), n)
		}
		for i, c := range children {
			cm := c.(map[string]any)
			if cm["run_id"] != fmt.Sprintf("batch-1-%d", i+1) || cm["status"] != "completed" || cm["workflow"] != "claim" {
				t.Fatalf("child %d: %v", i+1, cm)
			}
		}
		child := e.showJSON("batch-1-2")
		if p, _ := child["parent"].(map[string]any); p["run_id"] != "batch-1" || p["step"] != float64(1) {
			t.Fatalf("child's parent %v", child["parent"])
		}
		if text := e.mustCLI(0, "runs", "show", "batch-1-2").stdout; !strings.Contains(text, "child of run batch-1, started by its step 1") {
			t.Fatalf("runs show of a child:\n%s", text)
		}
		if text := e.mustCLI(0, "runs", "show", "batch-1").stdout; !strings.Contains(text, "CHILDREN") || !strings.Contains(text, "batch-1-3 (claim, started by step 1): completed") ||
			!strings.Contains(text, "started 3 child runs, now 3 completed") {
			t.Fatalf("runs show of the parent:\n%s", text)
		}
		if kinds := auditKinds(done); !strings.Contains(kinds, checkpoint.AuditChildren) {
			t.Fatalf("parent audit %s", kinds)
		}
		for i := 1; i <= n; i++ {
			if ps := e.paymentsFor(fmt.Sprintf("batch-1-%d", i)); len(ps) != 1 || ps[0].Amount != 1840 {
				t.Fatalf("child %d payments %+v", i, ps)
			}
		}

		// Cancelling a parent cancels its children.
		e.mustCLI(0, "start", "claims-batch", "--id", "batch-2", "--input", `{"count": 2, "amount": 1500}`)
		e.waitStatus("batch-2", checkpoint.StatusWaiting)
		e.waitStatus("batch-2-1", checkpoint.StatusWaiting)
		e.waitStatus("batch-2-2", checkpoint.StatusWaiting)
		e.mustCLI(0, "runs", "cancel", "batch-2", "--by", "ops")
		for _, id := range []string{"batch-2-1", "batch-2-2"} {
			if r := e.waitStatus(id, checkpoint.StatusCancelled); !strings.Contains(r.Error, "parent batch-2 cancelled") {
				t.Fatalf("%s: %q", id, r.Error)
			}
		}
		if r := e.mustRun("batch-2"); r.Status != checkpoint.StatusCancelled {
			t.Fatalf("batch-2 %s", r.Status)
		}
	})
}

func auditKinds(run checkpoint.Run) string {
	var k []string
	for _, a := range run.Audit {
		k = append(k, a.Kind)
	}
	return strings.Join(k, ",")
}
