package steps_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// oneTokenASecond stands in for the worker's fleet-wide limits
// (worker.Config.Flow): the first call has its token, the next would
// wait a second.
type oneTokenASecond struct{ taken int }

func (l *oneTokenASecond) Take(context.Context, string) (time.Duration, error) {
	l.taken++
	if l.taken > 1 {
		return time.Second, nil
	}
	return 0, nil
}

func (l *oneTokenASecond) SlowDownOn(context.Context, string, error) time.Duration { return 0 }

func ExampleResource() {
	ask := func(ctx context.Context, s *steps.Context, name string) (string, error) {
		// The call takes a token of the fleet-wide limit "anthropic"
		// (`durable limit set anthropic --rate 600/m`) before it is made.
		return steps.Call(ctx, s, name, "Summarize the claim", func(ctx context.Context) (string, error) {
			return "a dented bumper", nil
		}, steps.Resource("anthropic"))
	}
	s := steps.NewContext(steps.ContextConfig{RunID: "claim-0042", Step: 3, Attempt: 1, RateLimits: &oneTokenASecond{}})
	answer, err := ask(context.Background(), s, "first")
	fmt.Println(answer, err)

	// No token soon: the call is not made. Returned from the step, the
	// error hands the step back to the queue for the wait; it is not one
	// of the step's attempts.
	_, err = ask(context.Background(), s, "second")
	var te *steps.ThrottledError
	fmt.Println(errors.Is(err, steps.ErrThrottled), errors.As(err, &te) && te.Wait == time.Second)
	// Output:
	// a dented bumper <nil>
	// true true
}
