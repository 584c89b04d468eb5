package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// aliveTTL bounds a liveness mark's life: far above any stuck-after.
const aliveTTL = 24 * time.Hour

func (s *Store) aliveKey(id string) string { return s.tag(id) + "alive" }

// MarkAlive records that run id's step was at work at at
// (checkpoint.Liveness): one SET with an expiry.
func (s *Store) MarkAlive(ctx context.Context, id string, at time.Time) error {
	if err := readID(id); err != nil {
		return fmt.Errorf("mark alive: %w", err)
	}
	if err := s.batch.command(ctx, "SET", s.aliveKey(id), at.UnixMilli(), "PX", aliveTTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("mark %s alive: %w", id, err)
	}
	return nil
}

// LastAlive returns the newest liveness mark of run id, zero when none.
func (s *Store) LastAlive(ctx context.Context, id string) (time.Time, error) {
	if err := readID(id); err != nil {
		return time.Time{}, fmt.Errorf("last alive: %w", err)
	}
	v, err := s.rdb.Get(ctx, s.aliveKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("last alive %s: %w", id, err)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("last alive %s: %q: %w", id, v, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}
