// Command worker is the reference worker binary: it registers the example
// workflows and runs steps. Your own worker binary looks the same with your
// workflows in the registry.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/durable-run/durable/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.RunWorker(ctx, os.Args[1:], os.Stderr, cli.ReferenceWorkflows); err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		os.Exit(1)
	}
}
