// Command approver serves the approval API, the adjusters' inbox page and
// signed approval events from external systems.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/durable-run/durable/internal/approver"
	"github.com/durable-run/durable/pkg/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := approver.RunCommand(ctx, os.Args[1:], os.Stderr); err != nil {
		stop()
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "approver: %v\n", err)
		os.Exit(service.ExitCode(err))
	}
}
