package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/service"
)

func cmdRunsRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable runs redrive", stderr)
	var c service.Conn
	c.Register(fs)
	by := fs.String("by", "cli", "who redrives (recorded)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("runs redrive: want exactly one RUN")
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	run, err := cl.Redrive(ctx, pos[0], *by)
	if err != nil {
		return missingRun(ctx, cl.Store(), pos[0], err)
	}
	fmt.Fprintf(stdout, "redriven %s at step %d %s (redrive %d)\n", run.ID, run.Step, run.StepName, run.Redrives)
	return nil
}

func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "list" {
		return service.Usagef("dlq: want `dlq list [--json]`")
	}
	fs := service.NewFlagSet("durable dlq list", stderr)
	var c service.Conn
	c.Register(fs)
	asJSON := fs.Bool("json", false, "print a JSON array")
	pos, err := service.ParseArgs(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("dlq list: unexpected argument %q", pos[0])
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	dls, err := cl.DeadLetters(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		if dls == nil {
			dls = []queue.DeadLetter{}
		}
		return writeJSON(stdout, dls)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOW\tSTEP\tAT\tREASON")
	for _, d := range dls {
		fmt.Fprintf(tw, "%s\t%s\t%d %s\t%s\t%s\n", d.RunID, d.Workflow, d.Step, d.StepName, d.At.Local().Format(time.DateTime), d.Reason)
	}
	return tw.Flush()
}
