package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/durable-run/durable/internal/test/testenv"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// A worker built without a Logger logs to zerolog's global logger, as
// Config.Logger documents, instead of saying nothing.
func TestWorkerWithoutLoggerLogsToTheGlobalLogger(t *testing.T) {
	h := newHarness(t, storeKinds[0])
	var buf testenv.Buffer
	saved := log.Logger
	log.Logger = zerolog.New(&buf)
	t.Cleanup(func() { log.Logger = saved })

	_, stop := h.startWorker(steps.NewRegistry().MustRegister(pipeline()), func(c *worker.Config) { c.Logger = nil })
	h.start("pipeline", "logged-1", "")
	h.waitStatus("logged-1", checkpoint.StatusCompleted, 20*time.Second)
	stop()
	if out := buf.String(); !strings.Contains(out, `"run_id":"logged-1"`) || !strings.Contains(out, "step committed") {
		t.Fatalf("the global logger got no step logs of logged-1:\n%s", out)
	}
}
