package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/durable-run/durable/pkg/blob"
	"github.com/durable-run/durable/pkg/blob/objstore"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/schedulercmd"
	"github.com/durable-run/durable/pkg/service"
)

// cmdRunsExport writes ended runs as JSON lines, one `runs show --json`
// view a line, for a data warehouse.
func cmdRunsExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := service.NewFlagSet("durable runs export", stderr)
	var c service.Conn
	c.Register(fs)
	before := fs.String("ended-before", "", "export runs that ended before this time: RFC 3339 (2026-11-01T00:00:00Z), a date (2026-11-01, UTC) or an age (30d, 72h) (required)")
	after := fs.String("ended-after", "", "and at or after this time (same forms): an incremental export")
	status := fs.String("status", "", "only runs that ended in this status (completed, failed, cancelled, dead)")
	workflow := fs.String("workflow", "", "only runs of this workflow")
	archived := fs.Bool("archived", false, "also export the runs retention purged into the archive (Object Store bucket "+client.ArchiveBucket+"; reads the whole archive's listing)")
	pos, err := service.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return service.Usagef("runs export: unexpected argument %q", pos[0])
	}
	now := time.Now()
	var q client.ExportQuery
	if *before == "" {
		return service.Usagef("runs export: --ended-before is required, e.g. --ended-before 30d or --ended-before 2026-11-01")
	}
	if q.EndedBefore, err = parseWhen(*before, now); err != nil {
		return service.Usagef("runs export: --ended-before %v", err)
	}
	if *after != "" {
		if q.EndedAfter, err = parseWhen(*after, now); err != nil {
			return service.Usagef("runs export: --ended-after %v", err)
		}
	}
	q.Status, q.Workflow = checkpoint.Status(*status), *workflow
	cl, s, err := openClient(ctx, &c, stderr)
	if err != nil {
		return err
	}
	defer s.Close()
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	emit := func(v client.RunView) error { return enc.Encode(v) }
	n, err := cl.Export(ctx, q, emit)
	if errors.Is(err, client.ErrBadFilter) {
		return service.Usagef("runs %v", err)
	}
	if err == nil && *archived {
		var m int
		m, err = exportArchived(ctx, s, q, emit)
		n += m
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s exported\n", plural(n, "run", "runs"))
	return nil
}

func exportArchived(ctx context.Context, s *service.Session, q client.ExportQuery, emit func(client.RunView) error) (int, error) {
	archive, err := objstore.New(ctx, s.JetStream, objstore.Options{Bucket: client.ArchiveBucket, NoCreate: true})
	if errors.Is(err, blob.ErrNotFound) {
		return 0, nil // nothing was ever archived
	}
	if err != nil {
		return 0, err
	}
	return client.ExportArchived(ctx, archive, q, emit)
}

// parseWhen reads a time: RFC 3339, a date (midnight UTC), or an age
// before now (a Go duration, or whole days: 30d).
func parseWhen(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	var age schedulercmd.Days
	if err := age.Set(v); err == nil {
		return now.Add(-time.Duration(age)), nil
	}
	return time.Time{}, fmt.Errorf("%q: want RFC 3339 (2026-11-01T00:00:00Z), a date (2026-11-01) or an age (30d, 72h)", v)
}
