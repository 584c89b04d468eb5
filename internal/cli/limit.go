package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-run/durable/pkg/flow"
	"github.com/durable-run/durable/pkg/service"
	"github.com/durable-run/durable/pkg/workercmd"
)

// cmdLimit is `durable limit`: the fleet-wide limits of the resources
// steps' calls use (pkg/flow), read by every worker.
func cmdLimit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return service.Usagef("limit: want set, list, get or delete")
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "set":
		return cmdLimitSet(ctx, rest, stdout, stderr)
	case "list":
		return cmdLimitList(ctx, rest, stdout, stderr)
	case "get", "delete":
		return cmdLimitOne(ctx, sub, rest, stdout, stderr)
	}
	return service.Usagef("limit: unknown subcommand %q: want set, list, get or delete", args[0])
}

// limitFlags are the settings `durable limit set` takes, parsed apart
// from the command so that more kinds of limit can join them.
type limitFlags struct {
	rate  string
	burst int
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.rate, "rate", "", "tokens per period: N/s, N/m, N/h or N/<Go duration>, e.g. 10/s or 600/m (required)")
	fs.IntVar(&f.burst, "burst", 1, "tokens that may be taken at once after a quiet spell (1: a steady pace)")
}

// toRate checks the flags and returns the rate they set; a usage error
// names the flag and its value.
func (f *limitFlags) toRate() (flow.Rate, error) {
	if f.rate == "" {
		return flow.Rate{}, service.Usagef("limit set: --rate is required, e.g. --rate 10/s")
	}
	r, err := flow.ParseRate(f.rate)
	if err != nil {
		return flow.Rate{}, service.Usagef("limit set: --rate: %v", err)
	}
	r.Burst = f.burst
	if err := r.Validate(); err != nil {
		return flow.Rate{}, service.Usagef("limit set: --burst %d: %v", f.burst, err)
	}
	return r, nil
}

// openLimits connects and opens the limits, creating their bucket when
// missing (an operator's first set).
func openLimits(ctx context.Context, c *service.Conn, stderr io.Writer) (*flow.Store, func(), error) {
	_, s, err := openClient(ctx, c, stderr)
	if err != nil {
		return nil, nil, err
	}
	st, err := workercmd.OpenFlow(ctx, c, s)
	if err != nil {
		s.Close()
		return nil, nil, err
	}
	return st, s.Close, nil
}

// limitErr maps what pkg/flow refuses to the CLI's exit codes: a bad
// name or too many limits is a usage error (2), an unknown name is
// missing (3).
func limitErr(err error) error {
	switch {
	case errors.Is(err, flow.ErrBadLimit), errors.Is(err, flow.ErrTooMany):
		return service.UsageError{Msg: err.Error()}
	case errors.Is(err, flow.ErrNotFound):
		return fmt.Errorf("%w: %w", errNotFound, err)
	}
	return err
}

func cmdLimitSet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable limit set", stderr)
	var c service.Conn
	c.Register(fs)
	var lf limitFlags
	lf.register(fs)
	by := fs.String("by", "", "who sets it (recorded)")
	asJSON := fs.Bool("json", false, "print the limit as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("limit set: want exactly one NAME, e.g. `durable limit set anthropic --rate 600/m --burst 20`")
	}
	// Refused before connecting: bad input exits 2 with the servers away.
	rate, err := lf.toRate()
	if err != nil {
		return err
	}
	st, closeFn, err := openLimits(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	l, err := st.Set(ctx, pos[0], rate, *by)
	if err != nil {
		return limitErr(err)
	}
	if *asJSON {
		return writeJSON(stdout, viewLimit(l, time.Now()))
	}
	fmt.Fprintf(stdout, "limit %s: %s\n", l.Name, describeLimit(l, time.Now()))
	return nil
}

func cmdLimitList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable limit list", stderr)
	var c service.Conn
	c.Register(fs)
	asJSON := fs.Bool("json", false, "print the limits as a JSON array")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return service.Usagef("limit list: takes no arguments")
	}
	st, closeFn, err := openLimits(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	all, err := st.List(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		views := make([]limitView, 0, len(all))
		for _, l := range all {
			views = append(views, viewLimit(l, now))
		}
		return writeJSON(stdout, views)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRATE\tBURST\tSLOWED DOWN UNTIL\tSET BY\tSET AT")
	for _, l := range all {
		v := viewLimit(l, now)
		rate, burst := "-", "-"
		if v.Rate != "" {
			rate, burst = v.Rate, fmt.Sprint(v.Burst)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, rate, burst, slowedText(v.SlowedDownUntil, now), orDash(v.SetBy), fireTime(v.SetAt))
	}
	return tw.Flush()
}

// cmdLimitOne is get and delete of one limit.
func cmdLimitOne(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable limit "+sub, stderr)
	var c service.Conn
	c.Register(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("limit %s: want exactly one NAME", sub)
	}
	st, closeFn, err := openLimits(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	name := pos[0]
	if sub == "delete" {
		if err := st.Delete(ctx, name); err != nil {
			return limitErr(err)
		}
		if *asJSON {
			return writeJSON(stdout, map[string]string{"deleted": name})
		}
		fmt.Fprintf(stdout, "limit %s deleted: its calls run unlimited\n", name)
		return nil
	}
	l, err := st.Get(ctx, name)
	if err != nil {
		return limitErr(err)
	}
	if *asJSON {
		return writeJSON(stdout, viewLimit(l, time.Now()))
	}
	fmt.Fprintf(stdout, "limit %s: %s\n", l.Name, describeLimit(l, time.Now()))
	return nil
}

// limitView is a limit as `durable limit` prints it in JSON.
type limitView struct {
	Name string `json:"name"`
	// Rate in --rate's form ("10/s"); empty for a name that has no limit
	// set and is only slowed down after a provider's 429.
	Rate  string `json:"rate,omitempty"`
	Burst int    `json:"burst,omitempty"`
	// SlowedDownUntil is the end of the slow-down in effect, if any.
	SlowedDownUntil time.Time `json:"slowed_down_until,omitzero"`
	SetBy           string    `json:"set_by,omitempty"`
	SetAt           time.Time `json:"set_at,omitzero"`
}

func viewLimit(l flow.Limit, now time.Time) limitView {
	v := limitView{Name: l.Name, SetBy: l.SetBy, SetAt: l.SetAt}
	if l.Rate.N > 0 {
		v.Rate, _, _ = strings.Cut(l.Rate.String(), " ")
		v.Burst = l.Rate.Burst
	}
	if l.BlockedUntil.After(now) {
		v.SlowedDownUntil = l.BlockedUntil.UTC()
	}
	return v
}

// describeLimit is a limit in one line: "10/s burst 5, slowed down until
// 2026-01-02T03:04:05Z (2s left)".
func describeLimit(l flow.Limit, now time.Time) string {
	v := viewLimit(l, now)
	text := "no rate set"
	if v.Rate != "" {
		text = fmt.Sprintf("%s burst %d", v.Rate, v.Burst)
	}
	if !v.SlowedDownUntil.IsZero() {
		text += ", slowed down until " + slowedText(v.SlowedDownUntil, now)
	}
	return text
}

func slowedText(until, now time.Time) string {
	if until.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (%s left)", until.Format(time.RFC3339), until.Sub(now).Round(100*time.Millisecond))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
