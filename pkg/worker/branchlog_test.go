package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// countsLater wraps a real store and answers 0 to every branch writer but
// one that counts the whole fan-out in, as CommitBranch allows when a
// later writer is bound to count after it. The KV store does so whenever
// branches commit at once: it counts only in the writer of the newest
// branch key. This makes that happen on every store, every time.
type countsLater struct {
	checkpoint.Store
}

func (s countsLater) CommitBranch(ctx context.Context, cp checkpoint.Checkpoint) (int, error) {
	n, err := s.Store.CommitBranch(ctx, cp)
	if n < cp.Of {
		n = 0
	}
	return n, err
}

// The "branch committed" line gives branches_done only when the store
// counted: a 0 the store answers because a later writer counts is no
// count, and the line says so instead of "branches_done 0" of 5 (issue
// 25). A writer that counts them all logs 5.
func TestBranchCommittedLogsNoZeroCount(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			var buf testenv.Buffer
			log := zerolog.New(&buf)
			var p payments
			_, stop := h.startWorker(steps.NewRegistry().MustRegister(fanWorkflow(p.pay, nil, nil)), func(c *worker.Config) {
				c.Logger, c.Store = &log, countsLater{Store: h.store}
			})
			h.start("fan", "fan-log", `{"branches": 5}`)
			h.waitStatus("fan-log", checkpoint.StatusCompleted, 30*time.Second)
			stop()
			lines, all := 0, 0
			for _, l := range strings.Split(buf.String(), "\n") {
				var e map[string]any
				if json.Unmarshal([]byte(l), &e) != nil || e["message"] != "branch committed" {
					continue
				}
				lines++
				done, counted := e["branches_done"]
				switch {
				case counted && done == float64(5) && e["branches"] == float64(5):
					all++
				case counted:
					t.Errorf("%s: want branches_done 5 of 5, or none", l)
				case e["counted_by_a_later_branch"] != true:
					t.Errorf("%s: no branches_done, and no word of why", l)
				}
			}
			if lines != 5 || all < 1 {
				t.Fatalf("%d branch committed lines, %d counting all 5: want 5, and one at least\n%s", lines, all, buf.String())
			}
		})
	}
}
