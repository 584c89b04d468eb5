// Command worker is the reference worker binary: the example workflows
// (claim, agent-loop, refund-agent) on pkg/workercmd, the entry point your
// own worker binary uses too (see examples/expense), plus crash injection
// from DURABLE_CRASH for the demo and the tests.
package main

import (
	"fmt"
	"os"

	"github.com/durable-run/durable/internal/demo/examples/reference"
	"github.com/durable-run/durable/pkg/workercmd"
)

func main() {
	cfg, err := reference.Worker()
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		os.Exit(2)
	}
	workercmd.Main(cfg)
}
