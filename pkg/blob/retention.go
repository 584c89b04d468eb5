package blob

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// Runs is what retention reads of the checkpoint store; a
// checkpoint.Store is one.
type Runs interface {
	GetRun(ctx context.Context, id string) (checkpoint.Run, error)
}

// Retention deletes the blobs of runs that ended a while ago. A run's
// blobs live as long as it can still use them: while it runs or waits, and
// for After once it is completed, failed, cancelled or dead, so that an
// operator can still redrive a dead run, or read its documents, within
// that window. Sweep is safe to run from several schedulers at once:
// deleting a deleted object is no error.
type Retention struct {
	// Blobs is the store to sweep. Required.
	Blobs Store
	// Runs tells whether and when a run ended. Required.
	Runs Runs
	// After is how long a run's blobs outlive its end (the run's last
	// update while terminal). Required, positive.
	After time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// SweepResult counts what a Sweep deleted.
type SweepResult struct {
	Runs    int   // runs whose blobs were deleted
	Objects int   // objects deleted
	Bytes   int64 // their size
	Kept    int   // runs whose blobs were kept (live, or ended too recently)
}

// Sweep deletes the blobs of every run that ended more than After ago,
// and of objects whose run no longer exists once they are older than
// After. It goes on past a failing run and returns the errors joined.
func (r Retention) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	if r.Blobs == nil || r.Runs == nil {
		return res, errors.New("blob retention: Blobs and Runs are required")
	}
	if r.After <= 0 {
		return res, fmt.Errorf("blob retention: After is %s, want a positive duration", r.After)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	cutoff := now().Add(-r.After)

	objs, err := r.Blobs.List(ctx, "")
	if err != nil {
		return res, fmt.Errorf("blob retention: list blobs: %w", err)
	}
	byRun := map[string][]Info{}
	for _, o := range objs {
		if run := RunOf(o.Name); run != "" {
			byRun[run] = append(byRun[run], o)
		}
	}
	var errs []error
	for run, objs := range byRun {
		if err := ctx.Err(); err != nil {
			return res, errors.Join(append(errs, err)...)
		}
		expired, err := r.expired(ctx, run, objs, cutoff)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !expired {
			res.Kept++
			continue
		}
		deleted := 0
		for _, o := range objs {
			if err := r.Blobs.Delete(ctx, o.Name); err != nil {
				errs = append(errs, fmt.Errorf("blob retention: delete %s: %w", o.Name, err))
				continue
			}
			deleted++
			res.Objects++
			res.Bytes += o.Size
		}
		if deleted == len(objs) {
			res.Runs++
		}
	}
	return res, errors.Join(errs...)
}

// expired reports whether run's blobs may go.
func (r Retention) expired(ctx context.Context, run string, objs []Info, cutoff time.Time) (bool, error) {
	rec, err := r.Runs.GetRun(ctx, run)
	if errors.Is(err, checkpoint.ErrNotFound) {
		// The run was deleted (or the bucket is shared with another
		// store): its blobs go once none is younger than the window.
		for _, o := range objs {
			if o.ModTime.After(cutoff) {
				return false, nil
			}
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("blob retention: run %s: %w", run, err)
	}
	return rec.Status.Terminal() && rec.UpdatedAt.Before(cutoff), nil
}
