package worker_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/rs/zerolog/log"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// A worker built without a Logger logs to zerolog's global logger, as
// Config.Logger documents, instead of saying nothing.
func TestWorkerWithoutLoggerLogsToTheGlobalLogger(t *testing.T) {
	h := newHarness(t, storeKinds[0])
	var buf lockedBuffer
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

// lockedBuffer is a log sink the worker's goroutines write while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
