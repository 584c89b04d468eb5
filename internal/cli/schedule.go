package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/internal/scheduleops"
	"github.com/durable-run/durable/pkg/schedule"
	"github.com/durable-run/durable/pkg/schedulercmd"
	"github.com/durable-run/durable/pkg/service"
)

// cmdSchedule is `durable schedule`: schedules that start runs on a
// calendar (pkg/schedule), fired by the schedulers.
func cmdSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return service.Usagef("schedule: want create, list, pause, resume, delete or trigger")
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "create":
		return cmdScheduleCreate(ctx, rest, stdout, stderr)
	case "list":
		return cmdScheduleList(ctx, rest, stdout, stderr)
	case "pause", "resume", "delete", "trigger":
		return cmdScheduleChange(ctx, sub, rest, stdout, stderr)
	}
	return service.Usagef("schedule: unknown subcommand %q: want create, list, pause, resume, delete or trigger", args[0])
}

// openSchedules connects and opens the schedules, creating their bucket
// when missing (an operator's first create).
func openSchedules(ctx context.Context, c *service.Conn, stderr io.Writer) (scheduleops.Ops, func(), error) {
	cl, s, err := openClient(ctx, c, stderr)
	if err != nil {
		return scheduleops.Ops{}, nil, err
	}
	st, err := schedulercmd.OpenSchedules(ctx, c, s)
	if err != nil {
		s.Close()
		return scheduleops.Ops{}, nil, err
	}
	return scheduleops.Ops{Store: st, Client: cl}, s.Close, nil
}

// scheduleErr maps what pkg/schedule refuses to the CLI's exit codes: a
// bad spec, a name taken or a full store (its message names the bound) is
// a usage error (2), an unknown name is missing (3).
func scheduleErr(err error) error {
	switch {
	case errors.Is(err, schedule.ErrBadSpec), errors.Is(err, schedule.ErrExists), errors.Is(err, schedule.ErrTooMany):
		return service.UsageError{Msg: err.Error()}
	case errors.Is(err, schedule.ErrNotFound):
		return fmt.Errorf("%w: %w", errNotFound, err)
	}
	return err
}

func cmdScheduleCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable schedule create", stderr)
	var c service.Conn
	c.Register(fs)
	var sp schedule.Spec
	fs.StringVar(&sp.Workflow, "workflow", "", "workflow each fire starts (required)")
	fs.StringVar(&sp.Cron, "cron", "", `cron expression, 5 fields ("0 2 * * *") or @daily, @hourly... (required)`)
	fs.StringVar(&sp.TimeZone, "tz", "", "IANA time zone the expression reads its clock in (default UTC)")
	input := fs.String("input", "", "each run's input, a JSON object (default {})")
	overlap := fs.String("overlap", "", "while the previous run has not ended: skip (default), allow or cancel-previous")
	catchUp := fs.String("catch-up", "", "fires missed while no scheduler ran: last (default, the newest only) or all")
	fs.DurationVar(&sp.CatchUpWindow, "catch-up-window", 0, "a missed fire is owed while at most this old (1m-168h; default 24h)")
	fs.BoolVar(&sp.Paused, "paused", false, "create it paused (durable schedule resume starts it)")
	by := fs.String("by", "", "who creates it (recorded)")
	asJSON := fs.Bool("json", false, "print the schedule as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("schedule create: want exactly one NAME, e.g. `durable schedule create nightly --workflow reconcile --cron \"0 2 * * *\"`")
	}
	if sp.Workflow == "" || sp.Cron == "" {
		return service.Usagef("schedule create: --workflow W and --cron EXPR are required")
	}
	sp.Name, sp.Overlap, sp.CatchUp = pos[0], schedule.Overlap(*overlap), schedule.CatchUp(*catchUp)
	if *input != "" {
		sp.Input = json.RawMessage(*input)
	}
	// Refused before connecting: a bad expression or zone exits 2 even
	// with the servers away.
	if err := sp.Validate(); err != nil {
		return scheduleErr(err)
	}
	ops, closeFn, err := openSchedules(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	sc, warning, err := ops.Create(ctx, sp, *by)
	if err != nil {
		return scheduleErr(err)
	}
	if warning != "" {
		fmt.Fprintf(stderr, "durable: warning: %s\n", warning)
	}
	if *asJSON {
		return writeJSON(stdout, sc)
	}
	fmt.Fprintf(stdout, "created schedule %s: workflow %s, %q in %s, next fire %s\n",
		sc.Spec.Name, sc.Spec.Workflow, sc.Spec.Cron, sc.Spec.TimeZone, fireTime(sc.NextFire))
	return nil
}

func cmdScheduleList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable schedule list", stderr)
	var c service.Conn
	c.Register(fs)
	asJSON := fs.Bool("json", false, "print the schedules as a JSON array")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return service.Usagef("schedule list: takes no arguments")
	}
	ops, closeFn, err := openSchedules(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	all, err := ops.List(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, all)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tWORKFLOW\tCRON\tTZ\tOVERLAP\tSTATE\tNEXT FIRE\tLAST FIRE")
	for _, sc := range all {
		state := "active"
		if sc.Spec.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc.Spec.Name, sc.Spec.Workflow, sc.Spec.Cron, sc.Spec.TimeZone,
			sc.Spec.Overlap, state, fireTime(sc.NextFire), lastFire(sc.State.Last))
	}
	return tw.Flush()
}

// cmdScheduleChange is pause, resume, delete and trigger of one schedule.
func cmdScheduleChange(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable schedule "+sub, stderr)
	var c service.Conn
	c.Register(fs)
	by := fs.String("by", "", "who does it (recorded; a trigger's run is started by WHO, else by schedule:NAME)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("schedule %s: want exactly one NAME", sub)
	}
	ops, closeFn, err := openSchedules(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	name := pos[0]
	out, err := ops.Do(ctx, scheduleops.Action(sub), name, *by)
	if err != nil && !errors.Is(err, scheduleops.ErrNotStarted) {
		return scheduleErr(err)
	}
	err = notStarted(name, out, err)
	if *asJSON {
		// The fire, and the exit code of the text mode: 1 when no run
		// was started.
		if jerr := writeJSON(stdout, out); jerr != nil {
			return jerr
		}
		return err
	}
	switch v := out.(type) {
	case schedule.View:
		fmt.Fprintf(stdout, "schedule %s %s; next fire %s\n", name, sub+"d", fireTime(v.NextFire))
	case schedule.Fire:
		fmt.Fprintf(stdout, "schedule %s triggered: run %s %s%s\n", name, v.RunID, v.Result, reason(v.Reason))
	default:
		fmt.Fprintf(stdout, "schedule %s deleted\n", name)
	}
	return err
}

// notStarted is err, or, for a trigger the overlap policy skipped, the
// error that makes it exit 1 as a failed one does: asked to start a run,
// the command started none.
func notStarted(name string, out any, err error) error {
	fire, ok := out.(schedule.Fire)
	if err != nil || !ok || fire.Result != schedule.Skipped {
		return err
	}
	return fmt.Errorf("schedule %s: run %s not started: skipped by the overlap policy skip, %s; trigger again once it has ended (or cancel it)", name, fire.RunID, fire.Reason)
}

func fireTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func lastFire(f *schedule.Fire) string {
	if f == nil {
		return "-"
	}
	last := fmt.Sprintf("%s %s %s", fireTime(f.At), f.Result, f.RunID)
	if f.By != "" {
		last += " by " + f.By
	}
	return last
}

func reason(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
