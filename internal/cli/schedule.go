package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/pkg/client"
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
func openSchedules(ctx context.Context, c *service.Conn, stderr io.Writer) (*schedule.Store, *client.Client, func(), error) {
	cl, s, err := openClient(ctx, c, stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := schedulercmd.OpenSchedules(ctx, c, s)
	if err != nil {
		s.Close()
		return nil, nil, nil, err
	}
	return st, cl, s.Close, nil
}

// warnUnregistered says on stderr when no worker has registered workflow
// yet: the schedule is kept (its workers may start later), but its fires
// fail until one does.
func warnUnregistered(ctx context.Context, cl *client.Client, workflow string, stderr io.Writer) {
	infos, err := cl.Store().Workflows(ctx)
	if err != nil {
		return
	}
	var names []string
	for _, info := range infos {
		if info.Name == workflow {
			return
		}
		if !slices.Contains(names, info.Name) {
			names = append(names, info.Name)
		}
	}
	slices.Sort(names)
	fmt.Fprintf(stderr, "durable: warning: no worker has registered workflow %q (registered: %v); its fires are retried until one does, for the catch-up window\n", workflow, names)
}

// scheduleErr maps what pkg/schedule refuses to the CLI's exit codes: a
// bad spec is a usage error (2), an unknown name is missing (3).
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
	st, cl, closeFn, err := openSchedules(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	sc, err := st.Create(ctx, sp, *by)
	if err != nil {
		return scheduleErr(err)
	}
	warnUnregistered(ctx, cl, sp.Workflow, stderr)
	if *asJSON {
		return writeJSON(stdout, sc)
	}
	fmt.Fprintf(stdout, "created schedule %s: workflow %s, %q in %s, next fire %s\n",
		sc.Spec.Name, sc.Spec.Workflow, sc.Spec.Cron, sc.Spec.TimeZone, fireTime(sc.NextFire(time.Now())))
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
	st, _, closeFn, err := openSchedules(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	all, err := st.List(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		if all == nil {
			all = []schedule.Schedule{}
		}
		return writeJSON(stdout, all)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tWORKFLOW\tCRON\tTZ\tOVERLAP\tSTATE\tNEXT FIRE\tLAST FIRE")
	for _, sc := range all {
		state := "active"
		if sc.Spec.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc.Spec.Name, sc.Spec.Workflow, sc.Spec.Cron, sc.Spec.TimeZone,
			sc.Spec.Overlap, state, fireTime(sc.NextFire(now)), lastFire(sc.State.Last))
	}
	return tw.Flush()
}

// cmdScheduleChange is pause, resume, delete and trigger of one schedule.
func cmdScheduleChange(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable schedule "+sub, stderr)
	var c service.Conn
	c.Register(fs)
	by := fs.String("by", "", "who does it (recorded)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("schedule %s: want exactly one NAME", sub)
	}
	st, cl, closeFn, err := openSchedules(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	name := pos[0]
	var out any
	switch sub {
	case "pause":
		out, err = st.Pause(ctx, name, *by)
	case "resume":
		out, err = st.Resume(ctx, name, *by)
	case "delete":
		err = st.Delete(ctx, name)
		out = map[string]string{"deleted": name}
	case "trigger":
		out, err = schedule.NewFirer(st, cl).Trigger(ctx, name, time.Now())
	}
	if err != nil {
		return scheduleErr(err)
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	switch v := out.(type) {
	case schedule.Schedule:
		fmt.Fprintf(stdout, "schedule %s %s; next fire %s\n", name, sub+"d", fireTime(v.NextFire(time.Now())))
	case schedule.Fire:
		fmt.Fprintf(stdout, "schedule %s triggered: run %s %s%s\n", name, v.RunID, v.Result, reason(v.Reason))
		if v.Result == schedule.Failed {
			return fmt.Errorf("schedule %s: the trigger's run was not started: %s", name, v.Reason)
		}
	default:
		fmt.Fprintf(stdout, "schedule %s deleted\n", name)
	}
	return nil
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
	return fmt.Sprintf("%s %s %s", fireTime(f.At), f.Result, f.RunID)
}

func reason(r string) string {
	if r == "" {
		return ""
	}
	return " (" + r + ")"
}
