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

// A store spills every run record it writes: what leaves the record is
// stored apart, and checkpoint.Restore (over the store's History) puts
// it back for a reader that wants the whole run.
func ExampleRun_Spill() {
	run := checkpoint.Run{ID: "agent-7", Step: 3}
	for i := 0; i < 150; i++ {
		run.Audit = append(run.Audit, checkpoint.AuditEntry{Kind: checkpoint.AuditSignal, Step: 2})
	}
	payload := []byte(`{"args":"` + strings.Repeat("x", 4000) + `"}`)
	run.Approvals = []checkpoint.Approval{{Step: 2, By: "bob", Payload: payload}}

	sp := run.Spill()
	fmt.Println(len(sp.Audit), "audit entries from sequence", sp.AuditFrom, "moved;", len(run.Audit), "kept")
	fmt.Println(len(run.Approvals[0].Payload), run.Approvals[0].PayloadBlob == checkpoint.SHA256Hex(payload))
	// Output:
	// 50 audit entries from sequence 0 moved; 100 kept
	// 0 true
}

// A step, and a branch of a fan-out: the branches of the fan-out that
// step 3 returned are named by their join, step 4.
func ExampleStepRef() {
	for _, at := range []checkpoint.StepRef{checkpoint.AtStep(4), checkpoint.AtBranch(4, 2)} {
		fmt.Println(at, at.IsBranch())
	}
	// Output:
	// 4 false
	// 4.2 true
}
