package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

var storeKinds = testfleet.Kinds

// harness is one isolated deployment: its own nats-server and store.
type harness struct {
	*testfleet.Fleet
	t      testing.TB
	nc     *nats.Conn
	js     jetstream.JetStream
	store  checkpoint.Store
	client *client.Client
}

func newHarness(t testing.TB, kind string) *harness { return wrap(t, testfleet.New(t, kind)) }

// newHarnessOn uses the NATS server at url (a separate process when the
// test measures the worker's own memory).
func newHarnessOn(t testing.TB, kind, url string) *harness {
	return wrap(t, testfleet.NewOn(t, kind, url))
}

func wrap(t testing.TB, f *testfleet.Fleet) *harness {
	return &harness{Fleet: f, t: t, nc: f.NC, js: f.JS, store: f.Store, client: f.Client}
}

func (h *harness) startWorker(reg *steps.Registry, mod func(*worker.Config)) (*worker.Worker, func()) {
	h.t.Helper()
	return h.StartWorker(reg, mod)
}

func (h *harness) start(workflow, id, input string) {
	h.t.Helper()
	h.Start(workflow, id, input)
}

func (h *harness) waitStatus(id string, want checkpoint.Status, timeout time.Duration) checkpoint.Run {
	h.t.Helper()
	return h.WaitStatus(id, want, timeout)
}

func (h *harness) checkpoints(id string) []checkpoint.Checkpoint {
	h.t.Helper()
	return h.Checkpoints(id)
}

// assertContiguous checks checkpoints 1..n with no gap.
func assertContiguous(t testing.TB, cps []checkpoint.Checkpoint, n int) {
	t.Helper()
	if len(cps) != n {
		t.Fatalf("%d checkpoints, want %d", len(cps), n)
	}
	for i, cp := range cps {
		if cp.Step != i+1 {
			t.Fatalf("checkpoint %d has step %d", i+1, cp.Step)
		}
	}
}

// counter is a test workflow's state.
type counter struct {
	N     int      `json:"n"`
	Trail []string `json:"trail,omitempty"`
}

// pipeline is a fixed 3-step workflow.
func pipeline() *steps.Workflow[counter] {
	w := steps.New[counter]("pipeline", 1)
	add := func(next string) steps.StepFunc[counter] {
		var to steps.Ref[counter]
		if next != "" {
			to = w.Ref(next)
		}
		return func(_ context.Context, s *steps.Context, st counter) (steps.Outcome[counter], error) {
			st.N++
			st.Trail = append(st.Trail, s.StepName())
			if next == "" {
				return steps.Complete(st), nil
			}
			return steps.Next(to, st), nil
		}
	}
	return w.
		Step("one", add("two")).
		Step("two", add("three")).
		Step("three", add(""))
}

func joinTrail(st counter) string { return strings.Join(st.Trail, ",") }
