package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/durable-run/durable/internal/test/testfleet"
	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/client"
	"github.com/durable-run/durable/pkg/queue"
	"github.com/durable-run/durable/pkg/steps"
)

type state struct {
	Paid string `json:"paid"`
}

// Acceptance (issue 3, 6): a run that exhausts its retries ends dead with
// the reason; redrive completes it after the fault is removed, with no
// duplicate effect.
func TestRedriveAfterExhaustedRetries(t *testing.T) {
	for _, kind := range testfleet.Kinds {
		t.Run(kind, func(t *testing.T) {
			var effects atomic.Int64
			var broken atomic.Bool
			broken.Store(true)
			flow := steps.New[state]("fragile", 1).
				Step("pay", func(ctx context.Context, s *steps.Context, st state) (steps.Outcome[state], error) {
					id, err := steps.Call(ctx, s, "pay", s.IdempotencyKey(), func(context.Context) (string, error) {
						effects.Add(1)
						return "pay-1", nil
					})
					if err != nil {
						return steps.Outcome[state]{}, err
					}
					if broken.Load() {
						return steps.Outcome[state]{}, errors.New("ledger unavailable")
					}
					st.Paid = id
					return steps.Complete(st), nil
				}, steps.WithRetry(steps.RetryPolicy{Attempts: 2, Backoff: 20 * time.Millisecond}))
			f := testfleet.New(t, kind)
			f.StartWorker(steps.NewRegistry().MustRegister(flow), nil)
			ctx := context.Background()
			f.Start("fragile", "frag-1", "")
			dead := f.WaitStatus("frag-1", checkpoint.StatusDead, 30*time.Second)
			if !strings.Contains(dead.Error, "failed 2 times") || !strings.Contains(dead.Error, "ledger unavailable") {
				t.Fatalf("dead reason %q", dead.Error)
			}
			// The run is marked dead before its dead letter is published
			// (a crash between the two republishes it on redelivery), so
			// the letter shows up shortly after the status does.
			var dls []queue.DeadLetter
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				dls, err = f.Client.DeadLetters(ctx)
				if (err == nil && len(dls) > 0) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil || len(dls) != 1 || dls[0].RunID != "frag-1" || dls[0].Reason != dead.Error {
				t.Fatalf("dead letters %+v (%v)", dls, err)
			}
			// The fault is removed; the operator redrives.
			broken.Store(false)
			if _, err := f.Client.Redrive(ctx, "frag-1", "oncall"); err != nil {
				t.Fatal(err)
			}
			done := f.WaitStatus("frag-1", checkpoint.StatusCompleted, 30*time.Second)
			if n := effects.Load(); n != 1 {
				t.Errorf("the effect ran %d times, want once (journal replayed across the redrive)", n)
			}
			last := done.Audit[len(done.Audit)-1]
			if last.Kind != checkpoint.AuditRedriven || last.By != "oncall" || !strings.Contains(last.Reason, "ledger unavailable") {
				t.Errorf("audit %+v", done.Audit)
			}
			if _, err := f.Client.Redrive(ctx, "frag-1", "oncall"); !errors.Is(err, client.ErrNotDead) {
				t.Errorf("redrive of a completed run: %v", err)
			}
		})
	}
}
