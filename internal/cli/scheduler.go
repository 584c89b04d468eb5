package cli

import (
	"context"
	"io"
	"time"

	"github.com/durable-run/durable/internal/scheduler"
	"github.com/durable-run/durable/pkg/client"
)

// RunScheduler is the scheduler command: flags, connections, then
// scheduler.Run until ctx ends. Several replicas may run at once.
func RunScheduler(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlags("scheduler", stderr)
	var c conn
	c.register(fs)
	interval := fs.Duration("interval", time.Second, "time between sweeps of the deadline index")
	stuck := fs.Duration("stuck-after", 5*time.Minute, "re-publish the step of a running run with no progress for this long")
	lease := fs.Duration("lease", 30*time.Second, "how long a claimed deadline is hidden from other schedulers")
	parallel := fs.Int("parallel", 32, "expired waits handled at once")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("scheduler: unexpected argument %q", pos[0])
	}
	if *parallel < 1 {
		return usagef("scheduler: --parallel %d: want at least 1", *parallel)
	}
	log := newLogger(stderr, "scheduler")
	useRedisLogger(log)
	return keepTrying(ctx, log, "scheduler start", func() error {
		s, err := c.open(ctx, "durable-scheduler", log)
		if err != nil {
			return err
		}
		defer s.Close()
		sch, err := scheduler.New(scheduler.Config{Client: client.New(s.js, s.store), Interval: *interval, StuckAfter: *stuck, Lease: *lease, Parallel: *parallel, Logger: &log})
		if err != nil {
			return usageError{err.Error()}
		}
		return sch.Run(ctx)
	})
}
