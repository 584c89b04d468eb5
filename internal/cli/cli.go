// Package cli implements the durable command line: the operator contract of
// DESIGN.md (dev, demo, start, runs, approve) and the worker command.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/durable-run/durable/pkg/service"
)

// Exit codes.
const (
	exitOK      = service.ExitOK
	exitUsage   = service.ExitUsage
	exitMissing = 3 // the run (or another named thing) does not exist
)

const usage = `durable: durable execution for AI-agent runs

Usage:
  durable demo                        the claims scenario end to end (embedded, crashes injected)
  durable dev [--data DIR] [--nats-port 4222] [--http 127.0.0.1:8080] [--workers N] [--redis URL]
              [--metrics ADDR] [--tokens FILE] [--trace-url URL] [--retention 30d] [--archive]
  durable start WORKFLOW --id RUN [--input JSON]
  durable runs list [--status S] [--workflow W] [--older-than D] [--newer-than D]
                    [--past-ttl] [--stuck [--stuck-after 15m]] [--limit 100] [--cursor C] [--json]
                                      newest first, one page; the next page's cursor on stderr
  durable runs show RUN [--json]      timeline: steps, attempts, effects, parks, decisions
  durable runs export --ended-before T [--ended-after T] [--status S] [--workflow W] [--archived]
                                      ended runs as JSON lines (one runs show --json each)
  durable runs cancel RUN
  durable runs redrive RUN            a dead run back to its failed step
  durable dlq list [--json]
  durable stats [--sample 1000] [--stuck-after 15m] [--json]
                                      duplicate effects, resume rate, stuck runs, checkpoint size
  durable approve RUN --by WHO [--reject] [--reason TEXT]
  durable signal RUN NAME [--data JSON] [--id ID] [--by WHO] [--json]
                                      deliver a named signal (kept until a step waits for it)
  durable schedule create NAME --workflow W --cron EXPR [--tz TZ] [--input JSON]
                  [--overlap skip|allow|cancel-previous] [--catch-up last|all] [--catch-up-window 24h] [--paused]
  durable schedule list [--json] | pause NAME | resume NAME | delete NAME | trigger NAME [--by WHO] [--json]
                                      start runs on a calendar; each fire's run id is NAME-<fire time>
  durable limit set NAME [--rate 10/s [--burst 5]] [--concurrency N] [--concurrency-per-key N]
                  [--rate-per-key 2/s [--burst-per-key B]] [--by WHO] [--json]
  durable limit list [--json] | get NAME [--json] | delete NAME
                                      fleet-wide limits of the resources steps use (steps.Resource, steps.Uses),
                                      over all runs and per fairness key (a tenant)
  durable token create --file FILE --id WHO --groups G1,G2
  durable token revoke --file FILE --id WHO
  durable token list --file FILE [--json]
  durable bench [--store redis|kv|all] [--runs W] [--latency-runs R] [--concurrency N] [--skip-floor]
                [--parked N] [--only parked|fanout] [--sweep-schedulers K] [--durability default|strict]
                [--history N] [--json] [--profile DIR]
  durable worker [--nats URL] [--redis URL] [--concurrency N] [--ack-wait D] [--step-timeout D] [--metrics ADDR]
  durable scheduler [--nats URL] [--redis URL] [--stuck-after D] [--step-timeout D] [--parallel N] [--blob-retention D]
                    [--retention 30d] [--archive] [--metrics ADDR]
                    [--fleet-interval D] [--stuck-min D] [--ttl-grace D]
  durable approver --tokens FILE [--http ADDR] [--event-secrets FILE] [--four-eyes] [--metrics ADDR]
                   [--trace-url URL]

Connection flags (every command): --nats URL (DURABLE_NATS_URL, default
nats://127.0.0.1:4222; several comma-separated for a cluster), --redis URL
(DURABLE_REDIS_URL; a Redis Cluster as
redis+cluster://host1:port?addr=host2:port&addr=host3:port; empty uses the
JetStream KV store on the same NATS), --replicas N (DURABLE_REPLICAS,
default 1; 3 on a NATS cluster) for the streams and buckets a process
creates. --metrics ADDR serves /metrics, /healthz and /readyz (off by
default).
`

// Main runs the durable command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	if cmd := args[0]; cmd != "bench" && cmd != "bench-worker" {
		// Traces from the standard OTEL_* variables; off without them.
		shutdown, err := service.StartTracing(ctx, "durable-"+cmd)
		if err != nil {
			return exitCode(err, stderr)
		}
		defer service.StopTracing(shutdown)
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "demo":
		err = cmdDemo(ctx, rest, stdout, stderr)
	case "dev":
		err = cmdDev(ctx, rest, stdout, stderr)
	case "start":
		err = cmdStart(ctx, rest, stdout, stderr)
	case "runs":
		err = cmdRuns(ctx, rest, stdout, stderr)
	case "approve":
		err = cmdApprove(ctx, rest, stdout, stderr)
	case "signal":
		err = cmdSignal(ctx, rest, stdout, stderr)
	case "dlq":
		err = cmdDLQ(ctx, rest, stdout, stderr)
	case "schedule":
		err = cmdSchedule(ctx, rest, stdout, stderr)
	case "limit":
		err = cmdLimit(ctx, rest, stdout, stderr)
	case "stats":
		err = cmdStats(ctx, rest, stdout, stderr)
	case "bench":
		err = cmdBench(ctx, rest, stdout, stderr)
	case "bench-worker":
		err = cmdBenchWorker(ctx, rest, stdout, stderr)
	case "worker":
		err = RunWorker(ctx, rest, stderr, ReferenceWorkflows)
	case "scheduler":
		err = RunScheduler(ctx, rest, stderr)
	case "approver":
		err = RunApprover(ctx, rest, stderr)
	case "token":
		err = cmdToken(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "durable: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitUsage
	}
	fmt.Fprintf(stderr, "durable: %v\n", err)
	return ExitCode(err)
}

// ExitCode maps an error of a command to the process exit code: 2 for
// usage, 3 for a missing run, 1 otherwise.
func ExitCode(err error) int {
	if errors.Is(err, errNotFound) {
		return exitMissing
	}
	return service.ExitCode(err)
}
