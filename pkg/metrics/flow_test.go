package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/worker"
)

var (
	_ worker.FlowMetrics = (*metrics.Metrics)(nil)
	_ worker.SlotMetrics = (*metrics.Metrics)(nil)
)

// The rate and concurrency limits' events are series by resource.
func TestFlowMetrics(t *testing.T) {
	m := metrics.New()
	m.Throttled("model", false)
	m.TokenWaited("model", 300*time.Millisecond)
	m.Throttled("model", true)
	m.Throttled("model", true)
	m.SlowedDown("model", 2*time.Second)
	m.SlotWaited("model", 1500*time.Millisecond)
	m.Slots("model", 3, 7)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`durable_flow_throttled_total{how="waited",resource="model"} 1`,
		`durable_flow_throttled_total{how="handed_back",resource="model"} 2`,
		`durable_flow_token_wait_seconds_sum{resource="model"} 0.3`,
		`durable_flow_slowdowns_total{resource="model"} 1`,
		`durable_flow_slot_wait_seconds_sum{resource="model"} 1.5`,
		`durable_flow_slots_in_use{resource="model"} 3`,
		`durable_flow_steps_waiting{resource="model"} 7`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
