package checkpoint_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
)

func ExampleBudget_Check() {
	b := checkpoint.Budget{Warn: 1 << 10, Max: 4 << 10}

	warn, err := b.Check("claim-0042", 3, 2<<10)
	fmt.Println(warn, err)

	_, err = b.Check("claim-0042", 3, 8<<10)
	var tooLarge *checkpoint.TooLargeError
	fmt.Println(errors.As(err, &tooLarge), tooLarge.Size)
	// Output:
	// true <nil>
	// true 8192
}

func ExampleStatus_Terminal() {
	for _, s := range []checkpoint.Status{checkpoint.StatusWaiting, checkpoint.StatusDead} {
		fmt.Println(s, s.Terminal())
	}
	// Output:
	// waiting false
	// dead true
}

func ExampleFailure_Trimmed() {
	f := checkpoint.Failure{Attempt: 2, Error: strings.Repeat("x", 5000)}.Trimmed()
	fmt.Println(f.Attempt, len(f.Error), !f.At.IsZero())
	// Output:
	// 2 1024 true
}
