package cli_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Acceptance (issue 15): the fanout reference workflow through the CLI
// alone: N branches each pay 1 EUR under their own key, the join sums
// them, and `runs show` shows the branches (text and JSON). Out of range,
// the run fails with the reason.
func TestFanOutThroughCLI(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		const n = 25
		e.mustCLI(0, "start", "fanout", "--id", "fanout-7", "--input", fmt.Sprintf(`{"branches": %d}`, n))
		e.waitStatus("fanout-7", checkpoint.StatusCompleted)
		pays := e.paymentsFor("fanout-7")
		keys := map[string]bool{}
		for _, p := range pays {
			if p.Amount != 1 || keys[p.Key] {
				t.Fatalf("payment %+v (a key twice, or not 1 EUR)", p)
			}
			keys[p.Key] = true
		}
		for i := 1; i <= n; i++ {
			if !keys[fmt.Sprintf("fanout-7:step2.%d", i)] {
				t.Fatalf("no payment under the key of branch %d: %v", i, keys)
			}
		}
		if len(pays) != n {
			t.Fatalf("%d payments, want %d", len(pays), n)
		}

		v := e.showJSON("fanout-7")
		state, _ := v["state"].(map[string]any)
		branches, _ := v["branches"].([]any)
		if state["paid"] != float64(n) || len(branches) != n {
			t.Fatalf("runs show --json: state %v, %d branches", state, len(branches))
		}
		for i, b := range branches {
			bm := b.(map[string]any)
			if bm["committed"] != true || bm["branch"] != float64(i+1) || bm["step"] != float64(2) || bm["name"] != "pay-one" {
				t.Fatalf("branch %d: %v", i+1, bm)
			}
		}
		text := e.mustCLI(0, "runs", "show", "fanout-7").stdout
		for _, want := range []string{"BRANCHES", fmt.Sprintf("%d of %d branches committed", n, n), "fanned out to 25 branches, joined at step 2 (sum)", "fanout-7:step2.25 (step 2, branch 25)"} {
			if !strings.Contains(text, want) {
				t.Fatalf("runs show lacks %q:\n%s", want, text)
			}
		}

		// Out of range, refused when started: no run.
		for _, tc := range []struct{ input, want string }{
			{`{"branches": 1001}`, "/branches: maximum: got 1,001, want 1,000"},
			{`{"branches": 0}`, "/branches: minimum: got 0, want 1"},
			{`{"branches": 2.5}`, "/branches: got number, want integer"},
			{`{"branches": "8"}`, "/branches: got string, want integer"},
			{`{"branch": 8}`, "(root): additional properties 'branch' not allowed"},
			// Every violation, each by its pointer.
			{`{"branches": 0, "branch": 8}`, "(root): additional properties 'branch' not allowed; /branches: minimum: got 0, want 1"},
		} {
			r := e.mustCLI(2, "start", "fanout", "--id", "fanout-big", "--input", tc.input)
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("start fanout %s: %s, want %q", tc.input, r.stderr, tc.want)
			}
		}
		if _, err := e.getRun("fanout-big"); err == nil {
			t.Fatal("a refused start created the run")
		}
	})
}
