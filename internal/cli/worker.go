package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/durable-run/durable/internal/examples/agentloop"
	"github.com/durable-run/durable/internal/examples/claim"
	"github.com/durable-run/durable/internal/examples/refundagent"
	"github.com/durable-run/durable/internal/metrics"
	"github.com/durable-run/durable/pkg/agent"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// ReferenceWorkflows registers the example workflows of the reference
// worker. The claim workflow pays through DURABLE_PAYMENTS_URL and reads
// claims from DURABLE_CLAIMS_URL (optional). The refund-agent pays
// through the same API; its model is Anthropic's or OpenAI's when
// ANTHROPIC_API_KEY or OPENAI_API_KEY is set, else a recorded transcript.
func ReferenceWorkflows() *steps.Registry {
	return steps.NewRegistry().MustRegister(
		claim.New(claim.Config{
			PaymentsURL: os.Getenv("DURABLE_PAYMENTS_URL"),
			ClaimsURL:   os.Getenv("DURABLE_CLAIMS_URL"),
			// Keyed payments are counted: provider replays and refusals
			// of a key reused with another body.
			HTTP: &http.Client{Timeout: 10 * time.Second, Transport: metrics.Default().Transport("payments", nil)},
		}),
		agentloop.New(),
		refundagent.New(refundagent.Config{
			PaymentsURL: os.Getenv("DURABLE_PAYMENTS_URL"),
			HTTP:        &http.Client{Timeout: 30 * time.Second, Transport: metrics.Default().Transport("payments", nil)},
			Prices:      modelPrices(),
		}),
	)
}

// modelPrices reads DURABLE_MODEL_PRICES ("model=input/output,..." per
// million tokens); a malformed value is reported once and ignored, so a
// typo costs the spend figures, not the worker.
func modelPrices() agent.Prices {
	p, err := agent.ParsePrices(os.Getenv("DURABLE_MODEL_PRICES"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "durable: DURABLE_MODEL_PRICES ignored: %v\n", err)
		return nil
	}
	return p
}

// RunWorker is the worker command: flags, connections, then worker.Run
// until ctx ends (SIGTERM drains in-flight steps).
func RunWorker(ctx context.Context, args []string, stderr io.Writer, workflows func() *steps.Registry) error {
	fs := newFlags("worker", stderr)
	var c conn
	c.register(fs)
	concurrency := fs.Int("concurrency", 16, "steps run at once")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "redelivery timeout of an unacknowledged step (heartbeats extend it)")
	maxAckPending := fs.Int("max-ack-pending", 0, "steps of a workflow in flight across the fleet, set on the workflow's consumer when this worker creates it (default: the server's, 1000); an existing consumer keeps its own")
	drain := fs.Duration("drain-timeout", 0, "on SIGTERM, how long in-flight steps may finish (default: the ack wait)")
	metricsAddr := fs.String("metrics", "", metricsUsage)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("worker: unexpected argument %q", pos[0])
	}
	if *concurrency < 0 || *maxAckPending < 0 {
		return usagef("worker: --concurrency and --max-ack-pending must not be negative")
	}
	log := newLogger(stderr, "worker")
	useRedisLogger(log)
	reg := workflows()
	m := metrics.Default()
	waitReady(m)
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return usageError{err.Error()}
	}
	defer waitMetrics()
	return keepTrying(ctx, log, "worker start", func() error {
		s, err := c.open(ctx, "durable-worker", log)
		if err != nil {
			return err
		}
		s.ready(m)
		defer s.Close()
		c.warnFewReplicas(ctx, s, log)
		blobs, err := c.openBlobs(ctx, s)
		if err != nil {
			return err
		}
		w, err := worker.New(worker.Config{
			JetStream: s.js, Store: s.store, Registry: reg,
			Concurrency: *concurrency, AckWait: *ackWait, DrainTimeout: *drain, StreamReplicas: c.replicas, MaxAckPending: *maxAckPending,
			Logger: &log, Crash: os.Getenv("DURABLE_CRASH"), Metrics: m, Blobs: blobs,
		})
		if err != nil {
			return usageError{err.Error()}
		}
		// Run provisions the streams (with --replicas) before it pulls.
		return c.replicasError(w.Run(ctx))
	})
}

// metricsUsage is the help of every long-running command's --metrics.
const metricsUsage = "address to serve /metrics (Prometheus), /healthz and /readyz on, e.g. 127.0.0.1:9464 (default: off)"
