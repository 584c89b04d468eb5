package steps_test

import (
	"context"
	"errors"
	"testing"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

type receipt struct {
	ID       string `json:"id"`
	Replayed bool   `json:"replayed"`
}

func (r receipt) ProviderReplayed() bool { return r.Replayed }

// Effect hands fn the step's key, journals the result and lists the effect;
// a provider that says it replayed marks the effect replayed.
func TestEffectKeysJournalsAndRecords(t *testing.T) {
	j := newJournal()
	var keys []string
	pay := func(s *steps.Context, replayed bool) (receipt, error) {
		return steps.Effect(ctx, s, "pay", map[string]int{"amount": 40}, func(_ context.Context, key string) (receipt, error) {
			keys = append(keys, key)
			return receipt{ID: "pay_1", Replayed: replayed}, nil
		})
	}

	// The provider had seen the key (an attempt before crashed after paying
	// and before the journal): the effect is listed as replayed.
	s := attempt(1, j)
	r, err := pay(s, true)
	must(t, err)
	if r.ID != "pay_1" || len(keys) != 1 || keys[0] != "claim-0042:step3" {
		t.Fatalf("result %+v, keys %q; want pay_1 under claim-0042:step3", r, keys)
	}
	if got := s.Effects(); len(got) != 1 || got[0] != (checkpoint.Effect{Key: "claim-0042:step3", Replayed: true}) {
		t.Fatalf("effects %+v, want the step key, replayed", got)
	}
	if calls := s.Calls(); len(calls) != 1 || calls[0].Name != "pay" {
		t.Fatalf("journal %+v, want one call named pay", calls)
	}

	// The next attempt is answered by the journal: fn is not called.
	s = attempt(2, j)
	if _, err := pay(s, false); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("fn called again on attempt 2 (keys %q)", keys)
	}
	if got := s.Effects(); len(got) != 1 || !got[0].Replayed {
		t.Fatalf("attempt 2 effects %+v, want one, replayed", got)
	}
}

// A failed effect lists nothing and is tried again by the next attempt.
func TestEffectErrorIsNotRecorded(t *testing.T) {
	j := newJournal()
	boom := errors.New("payments API unavailable")
	s := attempt(1, j)
	_, err := steps.Effect(ctx, s, "pay", nil, func(context.Context, string) (int, error) { return 0, boom })
	if !errors.Is(err, boom) || len(s.Effects()) != 0 || len(s.Calls()) != 0 {
		t.Fatalf("err %v, effects %+v, calls %+v; want the error and nothing recorded", err, s.Effects(), s.Calls())
	}
	calls := 0
	s = attempt(2, j)
	if _, err := steps.Effect(ctx, s, "pay", nil, func(context.Context, string) (int, error) { calls++; return 7, nil }); err != nil || calls != 1 {
		t.Fatalf("attempt 2: err %v after %d calls; want the effect made once", err, calls)
	}
}

// One step, one key: a second effect under another name would present the
// same key for another request, so it is refused as a bug.
func TestSecondEffectIsRefused(t *testing.T) {
	s := attempt(1, newJournal())
	if _, err := steps.Effect(ctx, s, "pay", nil, func(context.Context, string) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	_, err := steps.Effect(ctx, s, "email", nil, func(context.Context, string) (int, error) {
		t.Fatal("the second effect ran")
		return 0, nil
	})
	if !errors.Is(err, steps.ErrSecondEffect) || !steps.IsPermanent(err) {
		t.Fatalf("second effect: err %v, want a permanent ErrSecondEffect", err)
	}
}

type pointerReceipt struct {
	Replayed bool `json:"replayed"`
}

func (r *pointerReceipt) ProviderReplayed() bool { return r.Replayed }

// The replay flag is read whether the result or a pointer to it implements
// Replayer, and a nil result says nothing was replayed instead of panicking.
func TestEffectReplayerForms(t *testing.T) {
	s := attempt(1, newJournal())
	if _, err := steps.Effect(ctx, s, "pay", nil, func(context.Context, string) (pointerReceipt, error) {
		return pointerReceipt{Replayed: true}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if e := s.Effects(); len(e) != 1 || !e[0].Replayed {
		t.Fatalf("a value result with a pointer-receiver ProviderReplayed: effects %+v, want replayed", e)
	}
	s = attempt(1, newJournal())
	if _, err := steps.Effect(ctx, s, "pay", nil, func(context.Context, string) (*receipt, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if e := s.Effects(); len(e) != 1 || e[0].Replayed {
		t.Fatalf("a nil pointer result: effects %+v, want one, not replayed", e)
	}
}
