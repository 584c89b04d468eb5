package cli_test

import (
	"strings"
	"testing"
)

// A command on a run that does not exist says so once, plainly, and exits
// 3: not "run nope-1: get run nope-1: not found" (issue 25).
func TestUnknownRunSaysSoOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, e *env) {
		for _, args := range [][]string{
			{"runs", "show", "nope-1"},
			{"runs", "show", "nope-1", "--json"},
			{"runs", "cancel", "nope-1"},
			{"runs", "redrive", "nope-1"},
			{"approve", "nope-1", "--by", "ana"},
			{"approve", "nope-1", "--by", "ana", "--reject"},
			{"signal", "nope-1", "delivered"},
		} {
			r := e.mustCLI(3, args...)
			if !strings.Contains(r.stderr, "durable: run nope-1 not found\n") || strings.Count(r.stderr, "nope-1") != 1 {
				t.Errorf("durable %s: stderr %q, want once: run nope-1 not found", strings.Join(args, " "), r.stderr)
			}
		}
	})
}
