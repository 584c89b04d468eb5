package steps

import (
	"context"
	"errors"
	"fmt"
	"reflect"
)

// Replayer is implemented by results that know whether the provider
// answered from its idempotency record (an Idempotent-Replayed answer: an
// earlier attempt had made the request). The flag must survive JSON (an
// exported field), since Effect journals the result.
type Replayer interface{ ProviderReplayed() bool }

// ErrSecondEffect: a step called Effect under two names. One step, one
// key: split the step, or key several effects yourself (Context.Key,
// Call and Context.RecordEffect).
var ErrSecondEffect = errors.New("a step has one Effect")

// Effect performs the step's side effect (a payment, an email, a write to
// another system) once for the logical step. fn gets the step's
// idempotency key, "<run>:step<n>" ("<run>:step<n>.<i>" in branch i, from
// 1, of a fan-out joined at step n), the same on every attempt, and must
// hand it to the provider, so that a retry after a crash between the
// effect and its record cannot do it twice. Like Call, the result is
// journaled under name as soon as fn returns: a retried step gets it back
// without calling fn. The effect is listed on the run with its key,
// marked replayed when the journal answered or when the result says the
// provider did (Replayer).
//
// A step has at most one Effect; a second name is ErrSecondEffect, a bug
// the step is not retried for. Keep its name the same on every attempt:
// an attempt that took another branch and named its effect otherwise
// would present the same key for another request.
func Effect[T any](ctx context.Context, s *Context, name string, args any, fn func(ctx context.Context, key string) (T, error), opts ...CallOption) (T, error) {
	var zero T
	if err := s.claimEffect(name); err != nil {
		return zero, err
	}
	key := s.IdempotencyKey()
	v, err := Call(ctx, s, name, args, func(ctx context.Context) (T, error) { return fn(ctx, key) }, opts...)
	if err != nil {
		return zero, err
	}
	replayed := s.Replayed(name) || providerReplayed(&v)
	s.RecordEffect(key, replayed)
	return v, nil
}

// providerReplayed asks v whether the provider replayed, whether T or *T
// implements Replayer; a nil pointer says no.
func providerReplayed[T any](v *T) bool {
	if r, ok := any(*v).(Replayer); ok {
		if rv := reflect.ValueOf(r); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return false
		}
		return r.ProviderReplayed()
	}
	if r, ok := any(v).(Replayer); ok {
		return r.ProviderReplayed()
	}
	return false
}

func (s *Context) claimEffect(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.effect != "" && s.effect != name {
		return Permanent(fmt.Errorf("effect %s of %s after effect %s: %w", name, s.IdempotencyKey(), s.effect, ErrSecondEffect))
	}
	s.effect = name
	return nil
}
