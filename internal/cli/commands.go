package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rs/zerolog"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/steps"
)

var errNotFound = checkpoint.ErrNotFound

func openClient(ctx context.Context, c *service.Conn, stderr io.Writer) (*client.Client, *service.Session, error) {
	log := zerolog.New(stderr).Level(zerolog.WarnLevel)
	service.UseRedisLogger(log)
	s, err := c.Open(ctx, "durable-cli", log)
	if err != nil {
		return nil, nil, err
	}
	return client.New(s.JetStream, s.Store), s, nil
}

func cmdStart(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable start", stderr)
	var c service.Conn
	c.Register(fs)
	id := fs.String("id", "", "run id: letters, digits, '-' and '_' (required)")
	input := fs.String("input", "", "run input, a JSON object")
	by := fs.String("by", "", "who starts the run (recorded)")
	asJSON := fs.Bool("json", false, "print the run as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("start: want exactly one WORKFLOW, e.g. `durable start claim --id claim-0042`")
	}
	if *id == "" {
		return service.Usagef("start: --id RUN is required")
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	run, created, err := cl.Start(ctx, client.StartRequest{Workflow: pos[0], RunID: *id, Input: json.RawMessage(*input), By: *by})
	if err != nil {
		if errors.Is(err, client.ErrBadInput) && !errors.Is(err, steps.ErrInputSchema) {
			// Not a JSON object: say what this workflow takes.
			return service.UsageError{Msg: err.Error() + inputHint(ctx, cl.Store(), pos[0])}
		}
		if errors.Is(err, client.ErrBadInput) || errors.Is(err, client.ErrBadRunID) || errors.Is(err, client.ErrUnknownWorkflow) {
			return service.UsageError{Msg: err.Error()}
		}
		return err
	}
	if *asJSON {
		return writeJSON(stdout, client.Summarize([]checkpoint.Run{run})[0])
	}
	if created {
		fmt.Fprintf(stdout, "started %s (workflow %s v%d) at step 1 %s\n", run.ID, run.Workflow, run.Version, run.StepName)
	} else {
		fmt.Fprintf(stdout, "run %s already exists (workflow %s, status %s, step %d); not restarted\n", run.ID, run.Workflow, run.Status, run.Step)
	}
	return nil
}

func cmdRuns(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return service.Usagef("runs: want list, show RUN, export, cancel RUN or redrive RUN")
	}
	switch args[0] {
	case "list":
		return cmdRunsList(ctx, args[1:], stdout, stderr)
	case "show":
		return cmdRunsShow(ctx, args[1:], stdout, stderr)
	case "cancel":
		return cmdRunsCancel(ctx, args[1:], stdout, stderr)
	case "redrive":
		return cmdRunsRedrive(ctx, args[1:], stdout, stderr)
	case "export":
		return cmdRunsExport(ctx, args[1:], stdout, stderr)
	}
	return service.Usagef("runs: unknown subcommand %q (list, show, export, cancel, redrive)", args[0])
}

func cmdRunsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable runs cancel", stderr)
	var c service.Conn
	c.Register(fs)
	by := fs.String("by", "cli", "who cancels (recorded)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("runs cancel: want exactly one RUN")
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	run, err := cl.Cancel(ctx, pos[0], *by)
	if err != nil {
		return missingRun(ctx, cl.Store(), pos[0], err)
	}
	fmt.Fprintf(stdout, "cancelled %s at step %d\n", run.ID, run.Step)
	return nil
}

func cmdApprove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable approve", stderr)
	var c service.Conn
	c.Register(fs)
	by := fs.String("by", "", "who decides (required)")
	reject := fs.Bool("reject", false, "reject instead of approve")
	reason := fs.String("reason", "", "reason, recorded with the decision")
	sha := fs.String("payload-sha256", "", "only decide if the pending payload has this SHA-256")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("approve: want exactly one RUN")
	}
	*by = strings.TrimSpace(*by)
	if *by == "" {
		return service.Usagef("approve: --by WHO is required")
	}
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	run, err := cl.Decide(ctx, client.Decision{RunID: pos[0], By: *by, Reject: *reject, Reason: *reason, Channel: client.ChannelCLI, PayloadSHA256: *sha})
	if err != nil {
		return missingRun(ctx, cl.Store(), pos[0], err)
	}
	verb, then := "approved", "the run resumes"
	if *reject {
		verb, then = "rejected", "the step runs again with the rejection and decides how the run ends"
	}
	fmt.Fprintf(stdout, "%s %s step %d by %s; %s\n", verb, run.ID, run.Step, *by, then)
	if n := len(run.Approvals); n > 0 {
		a := run.Approvals[n-1]
		fmt.Fprintf(stdout, "payload (sha256 %s): %s\n", a.PayloadSHA256, a.Payload)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
