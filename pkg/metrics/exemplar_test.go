package metrics_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// With tracing on, a step's duration keeps its run's trace as an
// exemplar, which /metrics shows to an OpenMetrics scraper: a dashboard
// goes from a slow step to its trace.
func TestStepDurationExemplar(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); otel.SetTracerProvider(noop.NewTracerProvider()) })

	f := testfleet.New(t, "redis")
	wf := steps.New[n]("traced", 1).
		Step("only", func(_ context.Context, _ *steps.Context, st n) (steps.Outcome[n], error) {
			return steps.Complete(st), nil
		})
	m := metrics.New()
	f.StartWorker(steps.NewRegistry().MustRegister(wf), func(c *worker.Config) { c.Metrics = m })
	f.Start("traced", "traced-1", "")
	run := f.WaitStatus("traced-1", checkpoint.StatusCompleted, 30*time.Second)
	id := client.TraceID(run)
	if id == "" {
		t.Fatal("the run has no trace")
	}

	req, err := http.NewRequest(http.MethodGet, serve(t, metrics.Mux(m))+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var found bool
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `durable_step_duration_seconds_bucket{step="only",workflow="traced",`) && strings.Contains(line, `# {trace_id="`+id+`"}`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no exemplar with the run's trace %s on durable_step_duration_seconds:\n%s", id, grep(string(body), "durable_step_duration_seconds_bucket"))
	}
}

func grep(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
