// Package mismatch reads a branch's outputs as another type than the
// branch returns: it does not compile (TestBranchOutputTypeChecked).
package mismatch

import (
	"context"

	"github.com/durable-run/durable/pkg/steps"
)

type state struct{}

func join(w *steps.Workflow[state], s *steps.Context) ([]string, error) {
	count := steps.AddBranch(w, "count", func(context.Context, *steps.Context, string) (int, error) { return 0, nil })
	return count.Outputs(s)
}

var _ = join
