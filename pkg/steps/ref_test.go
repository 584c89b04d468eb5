package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/durable-run/durable/pkg/steps"
)

// A typo in any kind of step target is refused when the workflow is
// registered, naming the typo; spelled right, the same workflow registers.
func TestRefTypoRefusedAtRegistration(t *testing.T) {
	type target func(w *steps.Workflow[order], to string) steps.StepFunc[order]
	kinds := map[string]target{
		"Next": func(w *steps.Workflow[order], to string) steps.StepFunc[order] {
			r := w.Ref(to)
			return func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
				return steps.Next(r, st), nil
			}
		},
		"FanOut join": func(w *steps.Workflow[order], to string) steps.StepFunc[order] {
			r := w.Ref(to)
			return func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
				return steps.FanOut(r, st), nil
			}
		},
		"SleepUntil": func(w *steps.Workflow[order], to string) steps.StepFunc[order] {
			r := w.Ref(to)
			return func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
				return steps.SleepUntil(r, st, time.Now()), nil
			}
		},
		"StartChildren": func(w *steps.Workflow[order], to string) steps.StepFunc[order] {
			r := w.Ref(to)
			return func(_ context.Context, _ *steps.Context, st order) (steps.Outcome[order], error) {
				return steps.StartChildren(r, st), nil
			}
		},
	}
	for kind, mk := range kinds {
		t.Run(kind, func(t *testing.T) {
			for _, tc := range []struct{ to, want string }{{"collect", ""}, {"colect", `Ref("colect") names no step`}} {
				w := steps.New[order]("orders", 1)
				w.Step("start", mk(w, tc.to)).Step("collect", noop)
				err := steps.NewRegistry().Register(w)
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("target %q: %v", tc.to, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("target %q: registered with %v, want an error saying %s", tc.to, err, tc.want)
				}
			}
		})
	}
	// A branch step is not a step Next can go to.
	w := steps.New[order]("orders", 1)
	w.Ref("leaf")
	steps.AddBranch(w, "leaf", func(context.Context, *steps.Context, int) (int, error) { return 1, nil })
	w.Step("a", noop)
	if err := steps.NewRegistry().Register(w); err == nil || !strings.Contains(err.Error(), `Ref("leaf") names a branch step`) {
		t.Fatalf("a Ref to a branch step: %v", err)
	}
}

// A signal a step waits for is declared by the SignalRef it waits with:
// one of another workflow that this one does not declare is refused when
// the step returns the wait.
func TestSignalRefOfAnotherWorkflow(t *testing.T) {
	other := steps.New[order]("other", 1).Step("a", noop)
	reviewed := other.Signal("reviewed")
	w := steps.New[order]("orders", 1).Step("a", func(_ context.Context, s *steps.Context, st order) (steps.Outcome[order], error) {
		_, wait, err := steps.Recv(s, reviewed, time.Hour)
		return wait, err
	})
	_, err := w.Execute(context.Background(), testContext(), "a", nil, false)
	if !steps.IsPermanent(err) || !strings.Contains(err.Error(), `awaits signal "reviewed", which the workflow does not declare`) {
		t.Fatalf("Execute: %v", err)
	}
}

// In a join, each BranchRef reads the outputs of its own branches, in
// branch order, as its own output type.
func TestOutputsByBranchStep(t *testing.T) {
	w := steps.New[order]("orders", 1)
	count := steps.AddBranch(w, "count", func(context.Context, *steps.Context, int) (int, error) { return 0, nil })
	name := steps.AddBranch(w, "name", func(context.Context, *steps.Context, int) (string, error) { return "", nil })
	s := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, StepName: "join",
		BranchOutputs: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`"a"`), json.RawMessage(`3`), json.RawMessage(`"b"`)},
		BranchSteps:   []string{"count", "name", "count", "name"}})
	ns, err := count.Outputs(s)
	if err != nil || len(ns) != 2 || ns[0] != 1 || ns[1] != 3 {
		t.Fatalf("count.Outputs = %v, %v; want [1 3]", ns, err)
	}
	names, err := name.Outputs(s)
	if err != nil || len(names) != 2 || names[0] != "a" || names[1] != "b" {
		t.Fatalf("name.Outputs = %q, %v; want [a b]", names, err)
	}
	// Without the steps (a context filled by hand), every output is taken.
	all := steps.NewContext(steps.ContextConfig{RunID: "r", Step: 2, BranchOutputs: []json.RawMessage{json.RawMessage(`"x"`)}})
	if got, err := name.Outputs(all); err != nil || len(got) != 1 || got[0] != "x" {
		t.Fatalf("Outputs without BranchSteps = %q, %v", got, err)
	}
	if _, err := count.Outputs(all); err == nil || errors.Is(err, steps.ErrNotAJoin) {
		t.Fatalf("an output of another type: %v, want a decode error", err)
	}
}

// A join that reads a branch's outputs as another type than the branch
// returns does not compile: the mismatch the issue asks registration to
// refuse is refused before, by the compiler. testdata/outputs/match is the
// same join with the branch's type, which compiles.
func TestBranchOutputTypeChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	build := func(dir string) (string, error) {
		out, err := exec.Command("go", "build", "-o", os.DevNull, "./testdata/outputs/"+dir).CombinedOutput()
		return string(out), err
	}
	if out, err := build("match"); err != nil {
		t.Fatalf("the matching join does not build: %v\n%s", err, out)
	}
	// The compiler names the value "count.Outputs(s)" or "1st function
	// result", by build flags; the types and the line are the same.
	out, err := build("mismatch")
	if err == nil || !strings.Contains(out, "mismatch.go:15:") || !strings.Contains(out, "(value of type []int) as []string value") {
		t.Fatalf("the mismatched join: %v\n%s\nwant a compile error at mismatch.go:15, []int as []string", err, out)
	}
}
