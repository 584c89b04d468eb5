// Package match reads a branch's outputs as the branch's output type: it
// compiles (TestBranchOutputTypeChecked).
package match

import (
	"context"

	"github.com/durable-run/durable/pkg/steps"
)

type state struct{}

func join(w *steps.Workflow[state], s *steps.Context) ([]int, error) {
	count := steps.AddBranch(w, "count", func(context.Context, *steps.Context, string) (int, error) { return 0, nil })
	return count.Outputs(s)
}

var _ = join
