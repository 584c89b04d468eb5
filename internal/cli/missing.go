package cli

import (
	"context"
	"errors"

	"github.com/durable-run/durable/pkg/checkpoint"
)

// runMissing is the error of a command on a run that does not exist,
// worded once for the operator. It wraps the client's error, so the exit
// code (exitMissing) and errors.Is see what they saw before.
type runMissing struct {
	msg string
	err error
}

func (e *runMissing) Error() string { return e.msg }
func (e *runMissing) Unwrap() error { return e.err }

// missingRun rewords err, the error of a command on run id, when the run
// does not exist: "run nope-1 not found", not every layer that found out
// ("run nope-1: get run nope-1: not found"); a purged run as its
// tombstone says. The wrapping stays in the client and the stores, whose
// callers match it with errors.Is; only the words change here.
//
// It reads the run again to be sure, since an error wrapping ErrNotFound
// may be about something else of a run that exists (a checkpoint). An
// invalid id, or an error with a second cause (an archive that could not
// be read), keeps its words: they say more.
func missingRun(ctx context.Context, store checkpoint.Runs, id string, err error) error {
	if !errors.Is(err, errNotFound) || !checkpoint.ValidID(id) || hasSecondCause(err) {
		return err
	}
	_, gerr := store.GetRun(ctx, id)
	if !errors.Is(gerr, errNotFound) {
		return err
	}
	msg := "run " + id + " not found"
	var purged *checkpoint.PurgedError
	if errors.As(gerr, &purged) {
		msg = purged.Error()
	}
	return &runMissing{msg: msg, err: err}
}

// hasSecondCause reports whether err's chain joins two errors anywhere
// (fmt.Errorf with two %w, errors.Join).
func hasSecondCause(err error) bool {
	for err != nil {
		if _, ok := err.(interface{ Unwrap() []error }); ok {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}
