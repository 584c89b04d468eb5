package cli

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
)

// keepTrying runs fn until it succeeds, ctx ends, or it fails with a usage
// error (bad flags or config won't get better). Transient failures (NATS or
// the store unreachable at start, provisioning refused while a server
// restarts) are logged and retried with backoff: a long-running service
// never exits because a dependency is away for a while.
func keepTrying(ctx context.Context, log zerolog.Logger, what string, fn func() error) error {
	backoff := 250 * time.Millisecond
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		var u usageError
		var f fatalError
		if errors.As(err, &u) {
			return err
		}
		if errors.As(err, &f) {
			return f.err
		}
		log.Error().Err(err).Dur("retry_in", backoff).Msg(what + " failed; retrying")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// fatalError ends keepTrying: retrying can't help (the listener died).
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
