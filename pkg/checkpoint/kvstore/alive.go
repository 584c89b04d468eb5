package kvstore

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

func aliveKey(id string) string { return "alive." + id }

// MarkAlive records that run id's step was at work at at
// (checkpoint.Liveness): one put of a small key.
func (s *Store) MarkAlive(ctx context.Context, id string, at time.Time) error {
	if err := readID(id); err != nil {
		return fmt.Errorf("mark alive: %w", err)
	}
	if _, err := s.kv.Put(ctx, aliveKey(id), []byte(strconv.FormatInt(at.UnixMilli(), 10))); err != nil {
		return fmt.Errorf("mark %s alive: %w", id, err)
	}
	return nil
}

// LastAlive returns the newest liveness mark of run id, zero when none.
func (s *Store) LastAlive(ctx context.Context, id string) (time.Time, error) {
	if err := readID(id); err != nil {
		return time.Time{}, fmt.Errorf("last alive: %w", err)
	}
	e, err := s.get(ctx, aliveKey(id))
	if err != nil {
		return time.Time{}, fmt.Errorf("last alive %s: %w", id, err)
	}
	if !e.found {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(string(e.value), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("last alive %s: %q: %w", id, e.value, err)
	}
	return time.UnixMilli(ms).UTC(), nil
}
