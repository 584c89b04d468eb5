package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/durable-run/durable/pkg/metrics"
)

// notConnected is the readiness of a command before its first session.
func notConnected(context.Context) error { return errors.New("not connected yet") }

// WaitReady makes /readyz fail until a session is open (see Session.Ready).
func WaitReady(m *metrics.Metrics) {
	m.Ready(map[string]func(context.Context) error{"nats": notConnected})
}

// Ready makes /readyz follow the session's connections: NATS connected
// (a reconnecting client is not ready), Redis answering PING when the
// store is Redis. A session closed for a retry fails both until the next
// one replaces them.
func (s *Session) Ready(m *metrics.Metrics) {
	nc := s.NATS
	checks := map[string]func(context.Context) error{
		"nats": func(context.Context) error {
			if st := nc.Status(); st != nats.CONNECTED {
				return fmt.Errorf("nats connection %s", st)
			}
			return nil
		},
	}
	if rdb := s.Redis; rdb != nil {
		checks["redis"] = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	}
	m.Ready(checks)
}
