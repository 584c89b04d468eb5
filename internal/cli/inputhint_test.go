package cli_test

import (
	"strings"
	"testing"
)

// A start whose --input is not a JSON object says what this workflow
// takes: an input its registered schema accepts, with the schema's
// properties, or that it declares no schema; never another workflow's
// example (issue 25: every workflow was told '{"amount": 1840}'). Each
// input suggested starts a run.
func TestStartBadJSONSaysWhatTheWorkflowTakes(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		for _, tc := range []struct {
			workflow string
			want     []string
		}{
			{"fanout", []string{`takes e.g. --input '{"branches":1}'`, "branches integer: branches to run, default 8"}},
			{"claims-batch", []string{`takes e.g. --input '{"amount":1,"count":1}'`, "count integer, required: child claims to start; amount integer"}},
			// Free text is not made up: the example leaves it out.
			{"shipment", []string{`takes e.g. --input '{}'`, "ttl string: how long to wait"}},
			{"claim", []string{"workflow claim declares no input schema", `--input '{}'`}},
		} {
			r := e.mustCLI(2, "start", tc.workflow, "--id", "hint-"+tc.workflow, "--input", "{amount: 5}")
			for _, w := range append(tc.want, "invalid character", "the input must be a JSON object") {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("start %s with bad JSON: stderr lacks %q:\n%s", tc.workflow, w, r.stderr)
				}
			}
			if strings.Contains(r.stderr, `1840}'`) {
				t.Errorf("start %s with bad JSON suggests the claim's input:\n%s", tc.workflow, r.stderr)
			}
			_, rest, _ := strings.Cut(r.stderr, "--input '")
			input, _, _ := strings.Cut(rest, "'")
			e.mustCLI(0, "start", tc.workflow, "--id", "hint-"+tc.workflow, "--input", input)
		}
	})
}
