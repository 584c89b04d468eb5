// Package workercmd is the main of a worker binary: your workflows, and
// every flag, variable and endpoint of `durable worker` — the connection
// flags and DURABLE_* variables (NATS, Redis or JetStream KV, credentials,
// TLS, --replicas), --concurrency, --ack-wait, --max-ack-pending,
// --drain-timeout, Prometheus /metrics with /healthz and /readyz on
// --metrics, JSON logs at DURABLE_LOG_LEVEL, the SIGTERM drain, and the
// fleet-wide rate limits of `durable limit` (pkg/flow's bucket
// durable_limits, created when missing).
//
//	func main() {
//		workercmd.Main(workercmd.Config{
//			Registry: steps.NewRegistry().MustRegister(expense.Workflow()),
//		})
//	}
//
// The reference binary cmd/worker is built the same way.
package workercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/metrics"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/worker"
)

// Config is what a worker binary brings to the flags of `durable worker`.
type Config struct {
	// Registry holds the workflows the worker runs. Required, not empty.
	Registry *steps.Registry
	// Hooks run at the boundaries of the step protocol (worker.Hook).
	// Optional.
	Hooks []worker.Hook
	// Name of the command in usage, errors and logs. Default "worker".
	Name string
	// Flags adds the binary's own flags to those of `durable worker`; they
	// are parsed with them, before Registry is used. Optional.
	Flags func(fs *flag.FlagSet)
	// Metrics receives the worker's metrics and serves them on --metrics.
	// Default metrics.Default(), the process's registry, which a workflow
	// may also report to (metrics.Default().Transport for its HTTP calls).
	Metrics *metrics.Metrics
}

// Main runs the worker with the process's arguments until SIGINT or
// SIGTERM (which drains the steps in flight), then exits: 0 after a
// drain, 2 for bad flags or -h, 1 for any other error.
func Main(cfg Config) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Stderr, cfg)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cfg.name(), err)
	}
	os.Exit(service.ExitCode(err))
}

func (c Config) name() string {
	if c.Name == "" {
		return "worker"
	}
	return c.Name
}

// Run is the worker command: it parses args, connects (retrying while the
// servers are away) and runs steps until ctx ends, then drains. It
// returns nil after a drain, a service.UsageError for bad flags or
// config, and flag.ErrHelp for -h. Logs go to stderr.
func Run(ctx context.Context, args []string, stderr io.Writer, cfg Config) error {
	name := cfg.name()
	fs := service.NewFlagSet(name, stderr)
	var c service.Conn
	c.Register(fs)
	concurrency := fs.Int("concurrency", 16, "steps run at once")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "redelivery timeout of an unacknowledged step (heartbeats extend it)")
	maxAckPending := fs.Int("max-ack-pending", 0, "steps of a workflow in flight across the fleet, set on the workflow's consumer when this worker creates it (default: the server's, 1000); an existing consumer keeps its own")
	stepTimeout := fs.Duration("step-timeout", 10*time.Minute, "longest a step (or branch) body may run before its context is cancelled; the schedulers' --stuck-after must be above it")
	drain := fs.Duration("drain-timeout", 0, "on SIGTERM, how long in-flight steps may finish (default: the ack wait)")
	metricsAddr := fs.String("metrics", "", service.MetricsUsage)
	if cfg.Flags != nil {
		cfg.Flags(fs)
	}
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("%s: unexpected argument %q", name, pos[0])
	}
	shutdownTracing, err := service.StartTracing(ctx, name)
	if err != nil {
		return err
	}
	defer service.StopTracing(shutdownTracing)
	if *concurrency < 0 || *maxAckPending < 0 {
		return service.Usagef("%s: --concurrency and --max-ack-pending must not be negative", name)
	}
	if *stepTimeout <= 0 {
		return service.Usagef("%s: --step-timeout %s: want a positive duration, e.g. 10m", name, *stepTimeout)
	}
	if cfg.Registry == nil || len(cfg.Registry.Names()) == 0 {
		return service.Usagef("%s: no workflows registered: give workercmd.Config a Registry with at least one", name)
	}
	log := service.NewLogger(stderr, name)
	service.UseRedisLogger(log)
	m := cfg.Metrics
	if m == nil {
		m = metrics.Default()
	}
	service.WaitReady(m)
	waitMetrics, err := metrics.Start(ctx, *metricsAddr, m, log)
	if err != nil {
		return service.UsageError{Msg: err.Error()}
	}
	defer waitMetrics()
	return service.KeepTrying(ctx, log, name+" start", func() error {
		s, err := c.Open(ctx, "durable-"+name, log)
		if err != nil {
			return err
		}
		s.Ready(m)
		defer s.Close()
		c.WarnFewReplicas(ctx, s, log)
		blobs, err := c.OpenBlobs(ctx, s)
		if err != nil {
			return err
		}
		limits, err := OpenFlow(ctx, &c, s)
		if err != nil {
			return err
		}
		w, err := worker.New(worker.Config{
			JetStream: s.JetStream, Store: s.Store, Registry: cfg.Registry,
			Concurrency: *concurrency, AckWait: *ackWait, StepTimeout: *stepTimeout, DrainTimeout: *drain, StreamReplicas: c.Replicas, MaxAckPending: *maxAckPending,
			Logger: &log, Hooks: cfg.Hooks, Metrics: m, Blobs: blobs, Flow: limits,
		})
		if err != nil {
			return service.UsageError{Msg: err.Error()}
		}
		// Run provisions the streams (with --replicas) before it pulls.
		return c.ReplicasError(w.Run(ctx))
	})
}

// OpenFlow opens the fleet-wide limits (pkg/flow's KV bucket
// durable_limits), creating the bucket with --replicas when it is missing:
// what a worker's Config.Flow and `durable limit` use.
func OpenFlow(ctx context.Context, c *service.Conn, s *service.Session) (*flow.Store, error) {
	st, err := flow.NewStore(ctx, s.JetStream, flow.StoreOptions{Replicas: c.Replicas})
	if err != nil {
		return nil, c.ReplicasError(fmt.Errorf("open the rate limits: %w", err))
	}
	return st, nil
}
