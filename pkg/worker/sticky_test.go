package worker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// One worker that commits a step and publishes the next usually gets that
// message back: it starts the step from what it committed, without a load,
// and the runs come out exactly as with loads.
func TestStickyStepsSkipTheLoad(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			w, _ := h.startWorker(steps.NewRegistry().MustRegister(pipeline()), nil)
			const runs = 20
			for i := range runs {
				h.start("pipeline", fmt.Sprintf("st-%d", i), "")
			}
			for i := range runs {
				id := fmt.Sprintf("st-%d", i)
				h.waitStatus(id, checkpoint.StatusCompleted, 20*time.Second)
				cps := h.checkpoints(id)
				if len(cps) != 3 {
					t.Fatalf("%s: %d checkpoints, want 3", id, len(cps))
				}
				if st := decode[counter](t, cps[2].State); st.N != 3 || joinTrail(st) != "one,two,three" {
					t.Fatalf("%s: final state %+v, want n=3 trail one,two,three", id, st)
				}
			}
			st := w.Stats()
			t.Logf("%+v", st)
			// Steps two and three of each run can start sticky.
			if st.Sticky == 0 || st.Sticky > 2*runs {
				t.Fatalf("%d sticky starts for %d runs of 3 steps, want between 1 and %d", st.Sticky, runs, 2*runs)
			}
		})
	}
}
