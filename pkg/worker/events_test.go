package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
)

// Every status change of a run is published on
// durable.events.<workflow>.<status> after it is stored, once, with the
// run's revision to order it.
//
// Events are compared in Rev order, not arrival order: the event of a
// change is published after the change is stored, so a decision the test
// makes as soon as it sees the run waiting can publish its "running"
// before the worker's "waiting" arrives.
func TestStatusEventsFollowTheRun(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, kind)
			var mu sync.Mutex
			got := map[string][]queue.StatusEvent{}
			sub, err := h.nc.Subscribe("durable.events.gate.*", func(m *nats.Msg) {
				var ev queue.StatusEvent
				if err := json.Unmarshal(m.Data, &ev); err != nil {
					t.Errorf("event %s: %v", m.Data, err)
					return
				}
				if m.Subject != "durable.events.gate."+ev.Status {
					t.Errorf("event %s on %s", ev.Status, m.Subject)
				}
				mu.Lock()
				got[ev.RunID] = append(got[ev.RunID], ev)
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			var pays atomic.Int64
			h.startWorker(steps.NewRegistry().MustRegister(gateFlow(&pays)), nil)
			ctx := context.Background()
			for _, id := range []string{"ok-1", "no-1", "cx-1"} {
				h.start("gate", id, "")
				h.waitStatus(id, checkpoint.StatusWaiting, 20*time.Second)
			}
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "ok-1", By: "ana", Channel: "cli"}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.Decide(ctx, client.Decision{RunID: "no-1", By: "ana", Channel: "cli", Reject: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.Cancel(ctx, "cx-1", "ops"); err != nil {
				t.Fatal(err)
			}
			h.waitStatus("ok-1", checkpoint.StatusCompleted, 20*time.Second)
			h.waitStatus("no-1", checkpoint.StatusFailed, 20*time.Second)
			want := map[string]string{
				"ok-1": "running waiting running completed",
				"no-1": "running waiting running failed",
				"cx-1": "running waiting cancelled",
			}
			byRev := func(id string) string {
				evs := slices.Clone(got[id])
				slices.SortStableFunc(evs, func(a, b queue.StatusEvent) int { return cmp.Compare(a.Rev, b.Rev) })
				var ss []string
				for _, ev := range evs {
					ss = append(ss, ev.Status)
				}
				return join(ss)
			}
			defer func() {
				if t.Failed() {
					mu.Lock()
					defer mu.Unlock()
					for id := range want {
						t.Logf("%s: events in Rev order: %s", id, byRev(id))
					}
				}
			}()
			testenv.Eventually(t, 5*time.Second, "every status event", func() bool {
				mu.Lock()
				defer mu.Unlock()
				for id, w := range want {
					if byRev(id) != w {
						return false
					}
				}
				return true
			})
		})
	}
}

func join(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
