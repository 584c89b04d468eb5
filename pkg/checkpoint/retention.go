package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrPurged: the run ended and retention purged it. Its id stays taken
// while its tombstone is kept: a *PurgedError says what the run was. A
// purged run is also ErrNotFound, so code that only asks whether a run
// is there needs no change.
var ErrPurged = errors.New("run purged")

// Tombstone is what is kept of a purged run: enough to refuse its id to a
// new run (an idempotency key like claim-0042:step6 is never presented
// for a second run) and to tell an operator what happened.
type Tombstone struct {
	ID       string    `json:"run_id"`
	Workflow string    `json:"workflow"`
	Status   Status    `json:"status"`
	EndedAt  time.Time `json:"ended_at"`
	PurgedAt time.Time `json:"purged_at"`
}

// PurgedError is the error of a read of a purged run.
type PurgedError struct {
	Tombstone Tombstone
}

func (e *PurgedError) Error() string {
	t := e.Tombstone
	return fmt.Sprintf("run %s (%s) ended %s at %s and was purged at %s", t.ID, t.Workflow, t.Status,
		t.EndedAt.UTC().Format(time.RFC3339), t.PurgedAt.UTC().Format(time.RFC3339))
}

// Is makes a purged run ErrPurged and ErrNotFound.
func (e *PurgedError) Is(target error) bool { return target == ErrPurged || target == ErrNotFound }

// Retention is what a store offers to purge ended runs. The scheduler
// drives it (see scheduler.Config.Retention): it reads the runs that
// ended before a cutoff, checks each may go, and purges it.
type Retention interface {
	// EndedBefore returns up to limit runs whose ended status they took
	// before cutoff, the earliest ended first. It reads the index of
	// ended runs: what it costs grows with limit, not with the runs kept.
	EndedBefore(ctx context.Context, cutoff time.Time, limit int) ([]Run, error)
	// Purge deletes run, as read (its Rev is still the stored revision,
	// ErrConflict otherwise; ErrNotFound when it is gone, purged by
	// another scheduler), with everything stored under it: checkpoints,
	// journals, failures, branch keys, its audit and approval logs, its
	// index entries. It leaves a tombstone kept for tombstoneTTL, which
	// GetRun and CreateRun answer with a *PurgedError; with 0, none (the
	// id is free again at once). A run that is not ended is refused.
	Purge(ctx context.Context, run Run, tombstoneTTL time.Duration) error
	// Tombstones counts the tombstones kept.
	Tombstones(ctx context.Context) (int64, error)
}
