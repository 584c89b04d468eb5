package service

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
)

// KeepTrying runs fn until it succeeds, ctx ends, or it fails with a usage
// error (bad flags or config won't get better). Transient failures (NATS or
// the store unreachable at start, provisioning refused while a server
// restarts) are logged and retried with backoff: a long-running service
// never exits because a dependency is away for a while.
func KeepTrying(ctx context.Context, log zerolog.Logger, what string, fn func() error) error {
	backoff := 250 * time.Millisecond
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		var u UsageError
		var f FatalError
		if errors.As(err, &u) {
			return err
		}
		if errors.As(err, &f) {
			return f.Err
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
