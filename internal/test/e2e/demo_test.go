package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/durable-run/durable/internal/test/testenv"
)

// TestDemo runs `durable demo` as a user would, on both stores, and holds
// it to its promise: exit 0, one payment of 1840 per claim.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level demo")
	}
	for _, kind := range []string{"kv", "redis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // its own servers, payments API and worker processes
			args := []string{"demo", "--timeout", "3m"}
			if kind == "redis" {
				args = append(args, "--redis", testenv.StartRedis(t).URL)
			}
			out, err := exec.Command(testenv.DurableBin(t), args...).CombinedOutput()
			if err != nil {
				t.Fatalf("durable demo: %v\n%s", err, out)
			}
			text := string(out)
			for _, want := range []string{
				"claim-0042: completed after 9 checkpoints; 1 payment(s), total 1840; step 6 presented its key 1 time(s)",
				"claim-0043: completed after 9 checkpoints; 1 payment(s), total 1840; step 6 presented its key 2 time(s)",
				"claim-0042: step 7 notify         checkpointed  <- attempt 2",
				"answered Idempotent-Replayed",
				"worker processes killed with SIGKILL: 2",
				"OK: each claim paid exactly once",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("demo output lacks %q:\n%s", want, text)
				}
			}
		})
	}
}
