package flow_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/durable-run/durable/pkg/flow"
)

func ExampleParseRate() {
	r, err := flow.ParseRate("600/m")
	if err != nil {
		panic(err)
	}
	r.Burst = 20
	fmt.Println(r, r.Validate())

	_, err = flow.ParseRate("10/d")
	fmt.Println(err, errors.Is(err, flow.ErrBadLimit))
	// Output:
	// 600/m burst 20 <nil>
	// rate "10/d": unknown period "d" (use s, m, h or a Go duration such as 10s) true
}

// tooMany is a provider's 429, as a model adapter's error would say it.
type tooMany struct{ after time.Duration }

func (e *tooMany) Error() string { return "HTTP 429" }

func (e *tooMany) RateLimited() (time.Duration, bool) { return e.after, true }

func ExampleRetryAfter() {
	err := fmt.Errorf("call anthropic: %w", &tooMany{after: 2 * time.Second})
	fmt.Println(flow.RetryAfter(err))
	fmt.Println(flow.RetryAfter(&tooMany{})) // no Retry-After: the default
	fmt.Println(flow.RetryAfter(errors.New("HTTP 500")))
	// Output:
	// 2s true
	// 1s true
	// 0s false
}
