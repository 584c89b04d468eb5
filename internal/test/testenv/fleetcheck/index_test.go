package fleetcheck_test

import (
	"strings"
	"testing"

	"github.com/durable-run/durable/internal/test/testenv/fleetcheck"
	"github.com/durable-run/durable/pkg/checkpoint"
)

// Index finds nothing wrong with an index that agrees with the records,
// and reports a run listed that the records (the ids it is given) do not
// account for, in its listing and in the counts.
func TestIndex(t *testing.T) {
	f := newFixture(t)
	f.run("ix-done", 2, checkpoint.StatusCompleted, "")
	f.run("ix-dead", 1, checkpoint.StatusDead, "boom")
	f.run("ix-running", 1, checkpoint.StatusRunning, "")
	problems, err := fleetcheck.Index(f.ctx, f.store, []string{"ix-done", "ix-dead", "ix-running"})
	if err != nil || len(problems) != 0 {
		t.Fatalf("index of three runs: %v, %v; want no problem", problems, err)
	}
	problems, err = fleetcheck.Index(f.ctx, f.store, []string{"ix-done", "ix-running"})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{"the dead listing holds [ix-dead], the records say []", "CountRuns says 1 dead runs, the records say 0"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}
