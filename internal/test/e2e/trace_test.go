package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
)

// A run that crashes one worker process and resumes on another, and waits
// for an approval in between, is one trace: an OTLP/HTTP receiver in this
// process decodes what the worker processes and this process (the start
// and the decision) export, and every span of the run carries its trace
// id; the steps come from two processes, the crashed step's redelivery is
// a span that says it replayed the commit, and no span stays open over the
// wait.
func TestTraceAcrossCrashAndWait(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test")
	}
	otlp := testenv.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // ms: the killed worker exports what it ended before dying
	t.Setenv("OTEL_SERVICE_NAME", "durable-worker-e2e")

	// This process starts and approves the run, with its own provider.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(otlp.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
	})

	const id = "trace-0001"
	f := newFleet(t, "redis", id+":6:after-checkpoint") // step 6 committed, step 7 not yet published
	f.startWorker()
	f.startWorker()
	f.waitRegistered()
	ctx := context.Background()
	if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: "claim", RunID: id}); err != nil {
		t.Fatal(err)
	}
	// The park's span is exported before the decision: the worker that
	// parked may be the one killed later, with what it had not sent yet.
	testenv.Eventually(t, 30*time.Second, id+" parked, its span exported", func() bool {
		for _, s := range runSpans(otlp.Spans(), id) {
			if s.Attrs["durable.outcome"] == "parked" {
				return true
			}
		}
		return false
	})
	f.drive([]string{id}, 2*time.Minute, nil)
	if got := f.waitKills(1, 10*time.Second); got != 1 {
		t.Fatalf("%d workers killed, want 1", got)
	}
	run, err := f.store.GetRun(ctx, id)
	if err != nil || run.Status != checkpoint.StatusCompleted {
		t.Fatalf("run %s: %v %v", id, run.Status, err)
	}
	traceID := client.TraceID(run)
	if len(traceID) != 32 {
		t.Fatalf("run record's trace %q: no trace id", run.Trace)
	}
	v, err := f.client.Inspect(ctx, id)
	if err != nil || v.TraceID != traceID {
		t.Fatalf("runs show trace_id %q, want %q (%v)", v.TraceID, traceID, err)
	}
	out, err := exec.Command(testenv.DurableBin(t), "runs", "show", "--redis", f.redisURL, "--nats", f.nats.URL, id).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "trace "+traceID) {
		t.Errorf("runs show does not print the trace (%v):\n%s", err, out)
	}

	// A second run, with no crash, for the spans of its calls.
	const id2 = "trace-0002"
	if _, _, err := f.client.Start(ctx, client.StartRequest{Workflow: "claim", RunID: id2}); err != nil {
		t.Fatal(err)
	}
	f.drive([]string{id2}, 2*time.Minute, nil)
	run2, err := f.store.GetRun(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	trace2 := client.TraceID(run2)
	if trace2 == "" || trace2 == traceID {
		t.Errorf("second run's trace %q, first's %q: want a trace of its own", trace2, traceID)
	}

	// Every step committed, and the workers' last spans, exported.
	var spans []testenv.Span
	testenv.Eventually(t, 15*time.Second, "the completing steps' spans", func() bool {
		done := 0
		for _, r := range []string{id, id2} {
			for _, s := range runSpans(otlp.Spans(), r) {
				if s.Name == "durable.step" && s.Attrs["durable.outcome"] == "completed" {
					done++
				}
			}
		}
		return done == 2
	})
	spans = runSpans(otlp.Spans(), id)
	f.stopAll()

	pids := map[string]bool{}
	steps := map[string][]string{} // step -> outcomes
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
		if s.TraceID != traceID {
			t.Errorf("span %s of %s (step %s) in trace %s, want %s", s.Name, id, s.Attrs["durable.step"], s.TraceID, traceID)
		}
		if s.End.Sub(s.Start) > 20*time.Second {
			t.Errorf("span %s (step %s) lasted %s: no span may stay open over a wait", s.Name, s.Attrs["durable.step"], s.End.Sub(s.Start))
		}
		if s.Name == "durable.step" {
			pids[s.Resource["process.pid"]] = true
			steps[s.Attrs["durable.step"]] = append(steps[s.Attrs["durable.step"]], s.Attrs["durable.outcome"])
			if s.ParentID == "" {
				t.Errorf("step %s span has no parent: it does not continue the run's trace", s.Attrs["durable.step"])
			}
		}
	}
	sort.Strings(names)
	t.Logf("%d spans of %s: %v; steps %v", len(spans), id, names, steps)
	if !slices.Contains(names, "durable.start") || !slices.Contains(names, "durable.decision") {
		t.Errorf("spans %v: want the start and the decision", names)
	}
	if len(pids) < 2 {
		t.Errorf("step spans from processes %v, want the crashed worker's and another's", pids)
	}
	for n := 1; n <= 9; n++ {
		if len(steps[fmt.Sprint(n)]) == 0 {
			t.Errorf("no span of step %d", n)
		}
	}
	if !slices.Contains(steps["6"], "replayed") {
		t.Errorf("step 6 outcomes %v: want the redelivery after the crash to have replayed the commit", steps["6"])
	}
	if !slices.Contains(steps["5"], "parked") {
		t.Errorf("step 5 outcomes %v: want the park", steps["5"])
	}

	// Journaled calls are children of their step's span, and a tool's
	// HTTP call (the demo payments client) a client span under its call.
	byID := map[string]testenv.Span{}
	var calls, pays []testenv.Span
	for _, s := range otlp.Spans() {
		if s.TraceID != trace2 {
			continue
		}
		byID[s.SpanID] = s
		switch s.Name {
		case "durable.call":
			calls = append(calls, s)
		case "payments.pay":
			pays = append(pays, s)
		}
	}
	// A run is a list of steps under its root, not a staircase: every
	// step's span is a child of durable.start (or of the decision that
	// resumed the run), never of the delivery that published it.
	for _, s := range byID {
		if s.Name != "durable.step" {
			continue
		}
		if p := byID[s.ParentID]; p.Name != "durable.start" && p.Name != "durable.decision" {
			t.Errorf("step %s span under %q (%s), want under the run's durable.start or its decision", s.Attrs["durable.step"], p.Name, s.ParentID)
		}
	}
	if len(calls) == 0 || len(pays) == 0 {
		t.Fatalf("%d call spans and %d payments spans in the run's trace, want both", len(calls), len(pays))
	}
	for _, c := range calls {
		if p, ok := byID[c.ParentID]; ok && p.Name != "durable.step" {
			t.Errorf("call %s under %s, want under a step", c.Attrs["durable.call"], p.Name)
		}
	}
	for _, p := range pays {
		parent, ok := byID[p.ParentID]
		if !ok || parent.Name != "durable.call" || parent.Attrs["durable.call"] != "pay" {
			t.Errorf("payments span under %+v, want under the pay call", parent)
		}
	}

	// The on-call replays the step stream by hand: the copies carry no
	// trace context, and each delivery's span links to its run's trace.
	f.mu.Lock()
	f.stopped = false
	f.mu.Unlock()
	f.startWorker()
	nc, js := f.nats.Connect(t)
	testenv.RepublishSteps(t, js)
	nc.Close()
	testenv.Eventually(t, 20*time.Second, "a replayed delivery of "+id+" linked to its trace", func() bool {
		for _, s := range runSpans(otlp.Spans(), id) {
			if s.Name == "durable.step" && s.TraceID != traceID && slices.Contains(s.Links, traceID) {
				return true
			}
		}
		return false
	})
	f.stopAll()
}

// runSpans are the spans about run id.
func runSpans(all []testenv.Span, id string) []testenv.Span {
	var out []testenv.Span
	for _, s := range all {
		if s.Attrs["durable.run_id"] == id {
			out = append(out, s)
		}
	}
	return out
}
