package cli

import (
	"context"
	"io"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/internal/demo/examples/reference"
	"github.com/durable-run/durable/pkg/schedulercmd"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/steps"
	"github.com/durable-run/durable/pkg/workercmd"
)

// ReferenceWorkflows registers the example workflows of the reference
// worker (reference.Workflows).
func ReferenceWorkflows() *steps.Registry { return reference.Workflows() }

// RunWorker is `durable worker` with the workflows of workflows and the
// crash injection of DURABLE_CRASH: cmd/worker's workercmd.Run.
func RunWorker(ctx context.Context, args []string, stderr io.Writer, workflows func() *steps.Registry) error {
	hooks, err := reference.Hooks()
	if err != nil {
		return service.Usagef("worker: %v", err)
	}
	return workercmd.Run(ctx, args, stderr, workercmd.Config{Registry: workflows(), Hooks: hooks})
}

// RunScheduler is `durable scheduler` (schedulercmd.Run).
func RunScheduler(ctx context.Context, args []string, stderr io.Writer) error {
	return schedulercmd.Run(ctx, args, stderr)
}

// RunApprover is `durable approver` (approver.RunCommand).
func RunApprover(ctx context.Context, args []string, stderr io.Writer) error {
	return approver.RunCommand(ctx, args, stderr)
}
