package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
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
	rate        string
	burst       int
	concurrency int
	perKey      int
	keyRate     string
	keyBurst    int
	// given: the flags the command line set (a 0 given is refused, not
	// taken for "not given").
	given map[string]bool
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.rate, "rate", "", "tokens per period for the calls that name the resource (steps.Resource): N/s, N/m, N/h or N/<Go duration>, e.g. 10/s or 600/m")
	fs.IntVar(&f.burst, "burst", 1, "tokens that may be taken at once after a quiet spell (1: a steady pace)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "N: at most N steps that use the resource (steps.Uses) run at once across the fleet")
	fs.IntVar(&f.perKey, "concurrency-per-key", 0, "N: at most N of those steps run at once for any one fairness key (Workflow.FairnessKey, e.g. a tenant), beside --concurrency or alone")
	fs.StringVar(&f.keyRate, "rate-per-key", "", "tokens per period for each fairness key's calls, beside --rate or alone, in --rate's form")
	fs.IntVar(&f.keyBurst, "burst-per-key", 1, "tokens a key may take at once after a quiet spell")
}

// check refuses flags that set nothing or something bad; a usage error
// names the flag and its value.
func (f *limitFlags) check() error {
	switch {
	case f.rate == "" && f.given["burst"]:
		return service.Usagef("limit set: --burst %d without --rate: a burst is of a rate, e.g. --rate 10/s --burst %d", f.burst, f.burst)
	case f.keyRate == "" && f.given["burst-per-key"]:
		return service.Usagef("limit set: --burst-per-key %d without --rate-per-key, e.g. --rate-per-key 2/s --burst-per-key %d", f.keyBurst, f.keyBurst)
	case (f.given["concurrency"] || f.concurrency != 0) && (f.concurrency < 1 || f.concurrency > flow.MaxConcurrency):
		return service.Usagef("limit set: --concurrency %d: use 1 to %d steps at once (durable limit delete NAME --only concurrency removes it)", f.concurrency, flow.MaxConcurrency)
	case (f.given["concurrency-per-key"] || f.perKey != 0) && (f.perKey < 1 || f.perKey > flow.MaxConcurrency):
		return service.Usagef("limit set: --concurrency-per-key %d: use 1 to %d steps at once per key (durable limit delete NAME --only concurrency-per-key removes it)", f.perKey, flow.MaxConcurrency)
	case f.rate == "" && f.concurrency == 0 && f.perKey == 0 && f.keyRate == "":
		return service.Usagef("limit set: give --rate, --concurrency, --concurrency-per-key, --rate-per-key or more of them, e.g. --rate 10/s or --concurrency 5 --concurrency-per-key 2")
	}
	if f.rate != "" {
		if _, err := f.toRate(); err != nil {
			return err
		}
	}
	if f.keyRate != "" {
		if _, err := f.toKeyRate(); err != nil {
			return err
		}
	}
	return nil
}

// toRate returns the rate the flags set; a usage error names the flag
// and its value.
func (f *limitFlags) toRate() (flow.Rate, error) {
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

// toKeyRate returns the rate per key the flags set; a usage error names
// the flag and its value.
func (f *limitFlags) toKeyRate() (flow.Rate, error) {
	r, err := flow.ParseRate(f.keyRate)
	if err != nil {
		return flow.Rate{}, service.Usagef("limit set: --rate-per-key: %v", err)
	}
	r.Burst = f.keyBurst
	if err := r.Validate(); err != nil {
		return flow.Rate{}, service.Usagef("limit set: --burst-per-key %d: %v", f.keyBurst, err)
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
	lf.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { lf.given[f.Name] = true })
	if err := lf.check(); err != nil {
		return err
	}
	if err := flow.ValidateName(pos[0]); err != nil {
		return limitErr(err)
	}
	st, closeFn, err := openLimits(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := setLimit(ctx, st, pos[0], lf, *by); err != nil {
		return limitErr(err)
	}
	return printLimit(ctx, st, pos[0], *asJSON, stdout)
}

// setLimit stores the rate and the concurrency lf gives name.
func setLimit(ctx context.Context, st *flow.Store, name string, lf limitFlags, by string) error {
	if lf.rate != "" {
		rate, err := lf.toRate()
		if err != nil {
			return err
		}
		if _, err := st.Set(ctx, name, rate, by); err != nil {
			return err
		}
	}
	if lf.concurrency > 0 {
		if _, err := st.SetConcurrency(ctx, name, lf.concurrency, by); err != nil {
			return err
		}
	}
	if lf.perKey > 0 {
		if _, err := st.SetConcurrencyPerKey(ctx, name, lf.perKey, by); err != nil {
			return err
		}
	}
	if lf.keyRate != "" {
		rate, err := lf.toKeyRate()
		if err != nil {
			return err
		}
		if _, err := st.SetRatePerKey(ctx, name, rate, by); err != nil {
			return err
		}
	}
	return nil
}

// readLimit reads name's rate and concurrency limits, with the keys busy
// under its per-key limit (ErrNotFound when it has none of them).
func readLimit(ctx context.Context, st *flow.Store, name string) (limitView, error) {
	v := limitView{Name: name}
	found := false
	if err := flow.ValidateName(name); err != nil {
		return limitView{}, err
	}
	err := readPart(&found, func() (flow.Limit, error) { return st.Get(ctx, name) }, func(l flow.Limit) {
		v = viewLimit(l, time.Now())
		v.Name = name
	})
	if err == nil {
		err = readPart(&found, func() (flow.Slots, error) { return st.Concurrency(ctx, name) }, v.withSlots)
	}
	if err == nil {
		err = readPart(&found, func() (flow.PerKeySlots, error) { return st.ConcurrencyPerKey(ctx, name) }, v.withPerKey)
	}
	if err == nil {
		err = readPart(&found, func() (flow.Limit, error) { return st.RatePerKey(ctx, name) }, v.withKeyRate)
	}
	if err != nil {
		return limitView{}, err
	}
	if !found {
		return limitView{}, fmt.Errorf("limit %s: %w", name, flow.ErrNotFound)
	}
	return v, nil
}

// readPart reads one kind of a limit and hands it to apply, setting
// found; a kind the name does not have is no error.
func readPart[T any](found *bool, get func() (T, error), apply func(T)) error {
	x, err := get()
	switch {
	case errors.Is(err, flow.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	*found = true
	apply(x)
	return nil
}

func printLimit(ctx context.Context, st *flow.Store, name string, asJSON bool, stdout io.Writer) error {
	v, err := readLimit(ctx, st, name)
	if err != nil {
		return limitErr(err)
	}
	if asJSON {
		return writeJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "limit %s: %s\n", v.Name, describeLimit(v, time.Now()))
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
	views, err := listLimits(ctx, st)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, views)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tRATE\tBURST\tCONCURRENCY\tSLOTS HELD\tPER KEY\tSLOWED DOWN UNTIL\tSET BY\tSET AT")
	for _, v := range views {
		rate, burst, conc, held := "-", "-", "-", "-"
		if v.Rate != "" {
			rate, burst = v.Rate, fmt.Sprint(v.Burst)
		}
		if v.Concurrency > 0 {
			conc, held = fmt.Sprint(v.Concurrency), fmt.Sprintf("%d by %s", v.SlotsHeld, plural(v.Holders, "worker", "workers"))
		}
		per := perKeyText(v)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, rate, burst, conc, held, per, slowedText(v.SlowedDownUntil, now), orDash(v.SetBy), fireTime(v.SetAt))
	}
	return tw.Flush()
}

// listLimits reads every rate and concurrency limit, by name.
func listLimits(ctx context.Context, st *flow.Store) ([]limitView, error) {
	rates, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	conc, err := st.ConcurrencyList(ctx)
	if err != nil {
		return nil, err
	}
	perKey, err := st.ConcurrencyPerKeyList(ctx)
	if err != nil {
		return nil, err
	}
	keyRates, err := st.RatePerKeyList(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	byName := map[string]*limitView{}
	at := func(name string) *limitView {
		v, ok := byName[name]
		if !ok {
			v = &limitView{Name: name}
			byName[name] = v
		}
		return v
	}
	for _, l := range rates {
		*at(l.Name) = viewLimit(l, now)
	}
	for _, s := range conc {
		at(s.Name).withSlots(s)
	}
	for _, p := range perKey {
		at(p.Name).withPerKey(p)
	}
	for _, r := range keyRates {
		at(r.Name).withKeyRate(r)
	}
	out := make([]limitView, 0, len(byName))
	for _, v := range byName {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// cmdLimitOne is get and delete of one limit.
func cmdLimitOne(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable limit "+sub, stderr)
	var c service.Conn
	c.Register(fs)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	var only string
	if sub == "delete" {
		fs.StringVar(&only, "only", "", "remove one kind of the limit and keep the others: rate, concurrency, concurrency-per-key or rate-per-key")
	}
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return service.Usagef("limit %s: want exactly one NAME", sub)
	}
	if err := flow.ValidateName(pos[0]); err != nil {
		return limitErr(err)
	}
	dels, err := limitKinds(only)
	if err != nil {
		return err
	}
	st, closeFn, err := openLimits(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	name := pos[0]
	if sub == "get" {
		return printLimit(ctx, st, name, *asJSON, stdout)
	}
	if err := deleteLimit(ctx, st, name, dels); err != nil {
		return limitErr(err)
	}
	if only != "" {
		if *asJSON {
			return writeJSON(stdout, map[string]string{"deleted": name, "only": only})
		}
		fmt.Fprintf(stdout, "limit %s: its %s deleted, the rest kept\n", name, only)
		return nil
	}
	if *asJSON {
		return writeJSON(stdout, map[string]string{"deleted": name})
	}
	fmt.Fprintf(stdout, "limit %s deleted: its calls and steps run unlimited\n", name)
	return nil
}

// limitKinds are the kinds of limit `limit delete --only` names, as the
// Store's deletes: all four for "".
func limitKinds(only string) ([]func(*flow.Store) func(context.Context, string) error, error) {
	kinds := map[string]func(*flow.Store) func(context.Context, string) error{
		"rate":                func(st *flow.Store) func(context.Context, string) error { return st.Delete },
		"concurrency":         func(st *flow.Store) func(context.Context, string) error { return st.DeleteConcurrency },
		"concurrency-per-key": func(st *flow.Store) func(context.Context, string) error { return st.DeleteConcurrencyPerKey },
		"rate-per-key":        func(st *flow.Store) func(context.Context, string) error { return st.DeleteRatePerKey },
	}
	if only == "" {
		return []func(*flow.Store) func(context.Context, string) error{kinds["rate"], kinds["concurrency"], kinds["concurrency-per-key"], kinds["rate-per-key"]}, nil
	}
	k, ok := kinds[only]
	if !ok {
		return nil, service.Usagef("limit delete: --only %q: use rate, concurrency, concurrency-per-key or rate-per-key", only)
	}
	return []func(*flow.Store) func(context.Context, string) error{k}, nil
}

// deleteLimit removes the kinds dels of name's limit (ErrNotFound when
// it has none of them).
func deleteLimit(ctx context.Context, st *flow.Store, name string, dels []func(*flow.Store) func(context.Context, string) error) error {
	found := false
	for _, kind := range dels {
		err := kind(st)(ctx, name)
		if err != nil && !errors.Is(err, flow.ErrNotFound) {
			return err
		}
		found = found || err == nil
	}
	if !found {
		return fmt.Errorf("limit %s: %w", name, flow.ErrNotFound)
	}
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
	// Concurrency is how many steps using the resource may run at once
	// (0: no concurrency limit); SlotsHeld what the workers' leases hold
	// of it now, and Holders how many workers hold or want slots.
	Concurrency int `json:"concurrency,omitempty"`
	SlotsHeld   int `json:"slots_held,omitempty"`
	Holders     int `json:"holders,omitempty"`
	// PerKey is how many of them may run at once for any one fairness
	// key (0: no per-key limit); Keys, in `limit get` only, the keys that
	// hold or want slots now.
	PerKey int       `json:"concurrency_per_key,omitempty"`
	Keys   []keyView `json:"keys,omitempty"`
	// RatePerKey and BurstPerKey: each key's own rate, in --rate's form.
	RatePerKey  string `json:"rate_per_key,omitempty"`
	BurstPerKey int    `json:"burst_per_key,omitempty"`
}

func (v *limitView) withKeyRate(l flow.Limit) {
	v.RatePerKey, _, _ = strings.Cut(l.Rate.String(), " ")
	v.BurstPerKey = l.Rate.Burst
	if v.SetAt.IsZero() || l.SetAt.After(v.SetAt) {
		v.SetBy, v.SetAt = l.SetBy, l.SetAt
	}
}

// keyView is one key busy under a per-key limit.
type keyView struct {
	Key       string `json:"key"`
	SlotsHeld int    `json:"slots_held"`
	Holders   int    `json:"holders"`
}

func (v *limitView) withPerKey(l flow.PerKeySlots) {
	v.PerKey = l.PerKey
	for _, k := range l.Keys {
		v.Keys = append(v.Keys, keyView{Key: k.Key, SlotsHeld: k.Held, Holders: k.Holders})
	}
	if v.SetAt.IsZero() || l.SetAt.After(v.SetAt) {
		v.SetBy, v.SetAt = l.SetBy, l.SetAt
	}
}

func (v *limitView) withSlots(s flow.Slots) {
	v.Concurrency, v.SlotsHeld, v.Holders = s.Limit, s.Held, s.Holders
	if v.SetAt.IsZero() || s.SetAt.After(v.SetAt) {
		v.SetBy, v.SetAt = s.SetBy, s.SetAt
	}
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
func describeLimit(v limitView, now time.Time) string {
	text := "no rate set"
	if v.RatePerKey != "" {
		text = "no rate over all keys"
	}
	if v.Rate != "" {
		text = fmt.Sprintf("%s burst %d", v.Rate, v.Burst)
	}
	if v.Concurrency > 0 {
		text += fmt.Sprintf(", %d at once (%d slots held by %s)", v.Concurrency, v.SlotsHeld, plural(v.Holders, "worker", "workers"))
	}
	if v.PerKey > 0 {
		text += fmt.Sprintf(", %d at once per key (%s)", v.PerKey, describeKeys(v.Keys))
	}
	if v.RatePerKey != "" {
		text += fmt.Sprintf(", %s burst %d per key", v.RatePerKey, v.BurstPerKey)
	}
	if !v.SlowedDownUntil.IsZero() {
		text += ", slowed down until " + slowedText(v.SlowedDownUntil, now)
	}
	return text
}

// perKeyText is what a limit allows each key, in `limit list`: "2 at
// once, 2/s burst 1", or "-".
func perKeyText(v limitView) string {
	var parts []string
	if v.PerKey > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", v.PerKey))
	}
	if v.RatePerKey != "" {
		parts = append(parts, fmt.Sprintf("%s burst %d", v.RatePerKey, v.BurstPerKey))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// describeKeys is the keys busy under a per-key limit, the first few
// with what they hold: "2 keys busy: tenant-a 2, tenant-b 1".
func describeKeys(keys []keyView) string {
	if len(keys) == 0 {
		return "no key busy"
	}
	const shown = 5
	parts := make([]string, 0, shown+1)
	for i, k := range keys {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(keys)-shown))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", strconv.Quote(k.Key), k.SlotsHeld))
	}
	return fmt.Sprintf("%s busy: %s", plural(len(keys), "key", "keys"), strings.Join(parts, ", "))
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
