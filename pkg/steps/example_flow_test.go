package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// Report is the state of the research examples.
type Report struct {
	Sources []string `json:"sources"`
	Words   int      `json:"words,omitempty"`
	Summary string   `json:"summary,omitempty"`
}

// Page is what a fetch branch returns.
type Page struct {
	URL   string `json:"url"`
	Words int    `json:"words"`
}

// step runs step name of wf as a worker would, on state, and prints the
// outcome: where the run goes and with what.
func step[S any](wf *steps.Workflow[S], cfg steps.ContextConfig, state string) steps.Result {
	res, err := wf.Execute(context.Background(), steps.NewContext(cfg), cfg.StepName, json.RawMessage(state), false)
	if err != nil {
		fmt.Println("error:", err)
		return res
	}
	fmt.Println(strings.Join(strings.Fields(fmt.Sprint(res.Kind, " ", res.Next, " ", string(res.State))), " "))
	return res
}

func ExampleFanOut() {
	wf := steps.New[Report]("research", 1)
	count := wf.Ref("count")
	// A branch step: input I, output O, both JSON; each branch has its
	// own journal and idempotency key ("<run>:step2.<i>").
	fetch := steps.AddBranch(wf, "fetch", func(_ context.Context, s *steps.Context, url string) (Page, error) {
		return Page{URL: url, Words: len(url)}, nil // a keyed fetch, in real life
	})
	wf.Step("plan", func(_ context.Context, _ *steps.Context, r Report) (steps.Outcome[Report], error) {
		branches := make([]steps.Branch, len(r.Sources))
		for i, url := range r.Sources {
			branches[i] = fetch.With(url)
		}
		return steps.FanOut(count, r, branches...), nil
	}).Step("count", func(_ context.Context, s *steps.Context, r Report) (steps.Outcome[Report], error) {
		pages, err := fetch.Outputs(s) // []Page, in branch order
		if err != nil {
			return steps.Outcome[Report]{}, err
		}
		for _, p := range pages {
			r.Words += p.Words
		}
		return steps.Complete(r), nil
	})
	fmt.Println(wf.Validate())
	res := step(wf, steps.ContextConfig{RunID: "r-1", Step: 1, StepName: "plan"}, `{"sources":["https://a.example","https://bb.example"]}`)
	for _, b := range res.Branches {
		fmt.Println(b.Step, string(b.Input))
	}
	// The worker runs the branches, each on any worker, then the join.
	step(wf, steps.ContextConfig{RunID: "r-1", Step: 2, StepName: "count",
		BranchOutputs: []json.RawMessage{json.RawMessage(`{"url":"https://a.example","words":17}`), json.RawMessage(`{"url":"https://bb.example","words":18}`)},
		BranchSteps:   []string{"fetch", "fetch"}}, string(res.State))
	// Output:
	// <nil>
	// fan-out count {"sources":["https://a.example","https://bb.example"]}
	// fetch "https://a.example"
	// fetch "https://bb.example"
	// complete {"sources":["https://a.example","https://bb.example"],"words":35}
}

func ExampleRecv() {
	wf := steps.New[Report]("review", 1)
	reviewed := wf.Signal("reviewed") // `durable signal RUN reviewed --data '{...}'`
	wf.Step("review", func(_ context.Context, s *steps.Context, r Report) (steps.Outcome[Report], error) {
		sig, wait, err := steps.Recv(s, reviewed, time.Hour)
		if sig == nil {
			return wait, err // parks the run; after an hour with no signal, the run goes dead
		}
		r.Summary = string(sig.Data)
		return steps.Complete(r), nil
	})
	cfg := steps.ContextConfig{RunID: "r-1", Step: 3, StepName: "review"}
	res := step(wf, cfg, `{"sources":[]}`)
	fmt.Println(res.Signal.Name, res.Signal.TTL)
	// The signal comes: the worker runs the same step again.
	cfg.Signals = []checkpoint.Signal{{Name: "reviewed", ID: "sig-1", Data: json.RawMessage(`"ok"`)}}
	step(wf, cfg, `{"sources":[]}`)
	// Or the hour passes first.
	cfg.Signals = []checkpoint.Signal{{Name: "reviewed", ID: "expired:3:0", Expired: true}}
	_, err := wf.Execute(context.Background(), steps.NewContext(cfg), "review", json.RawMessage(`{}`), false)
	fmt.Println(errors.Is(err, steps.ErrSignalExpired), steps.IsPermanent(err))
	// Output:
	// wait
	// reviewed 1h0m0s
	// complete {"sources":[],"summary":"\"ok\""}
	// true true
}

func ExampleAwaitSignal() {
	wf := steps.New[Report]("review", 1)
	reviewed := wf.Signal("reviewed")
	wf.Step("review", func(_ context.Context, s *steps.Context, r Report) (steps.Outcome[Report], error) {
		// Recv in two parts: read, else wait.
		sig, err := s.Signal(reviewed.Name())
		if err != nil {
			return steps.Complete(r), nil // the wait expired: finish without a review
		}
		if sig == nil {
			return steps.AwaitSignal(reviewed, 24*time.Hour), nil
		}
		r.Summary = "reviewed"
		return steps.Complete(r), nil
	})
	res := step(wf, steps.ContextConfig{RunID: "r-1", Step: 1, StepName: "review"}, `{}`)
	fmt.Println(res.Signal.Name, res.Signal.TTL)
	// Output:
	// wait
	// reviewed 24h0m0s
}

func ExampleSleepUntil() {
	wf := steps.New[Report]("digest", 1)
	send := wf.Ref("send")
	wf.Step("wait", func(_ context.Context, _ *steps.Context, r Report) (steps.Outcome[Report], error) {
		// A durable timer: no process waits; the scheduler wakes the run.
		at := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC)
		return steps.SleepUntil(send, r, at), nil
	}).Step("send", func(_ context.Context, _ *steps.Context, r Report) (steps.Outcome[Report], error) {
		return steps.Complete(r), nil
	})
	res := step(wf, steps.ContextConfig{RunID: "r-1", Step: 1, StepName: "wait"}, `{}`)
	fmt.Println(res.Until)
	// Output:
	// sleep send {"sources":null}
	// 2026-12-04 08:00:00 +0000 UTC
}

func ExampleRunChildren() {
	wf := steps.New[Report]("research", 1)
	wf.Step("summarize", func(_ context.Context, s *steps.Context, r Report) (steps.Outcome[Report], error) {
		ended, wait, err := steps.RunChildren(s, r, steps.Child{Workflow: "summarize", Input: r.Sources})
		if ended == nil {
			return wait, err // starts the child run; this step runs again when it has ended
		}
		if ended[0].Status != checkpoint.StatusCompleted {
			return steps.Fail(r, "summary "+string(ended[0].Status)+": "+ended[0].Error), nil
		}
		r.Summary = strings.Trim(string(ended[0].State), `"`)
		return steps.Complete(r), nil
	})
	res := step(wf, steps.ContextConfig{RunID: "r-1", Step: 2, StepName: "summarize"}, `{"sources":["https://a.example"]}`)
	fmt.Println(res.Children[0].ID, res.Children[0].Workflow, string(res.Children[0].Input))
	// The child completed: step 3 is the same step, run again.
	step(wf, steps.ContextConfig{RunID: "r-1", Step: 3, StepName: "summarize",
		Children: []steps.ChildResult{{ID: "r-1-s2-1", Workflow: "summarize", Status: checkpoint.StatusCompleted, State: json.RawMessage(`"two lines"`)}}}, string(res.State))
	// Output:
	// children summarize {"sources":["https://a.example"]}
	// r-1-s2-1 summarize ["https://a.example"]
	// complete {"sources":["https://a.example"],"summary":"two lines"}
}

func ExampleStartChildren() {
	wf := steps.New[Report]("batch", 1)
	collect := wf.Ref("collect")
	wf.Step("start", func(_ context.Context, s *steps.Context, r Report) (steps.Outcome[Report], error) {
		kids := make([]steps.Child, len(r.Sources))
		for i, url := range r.Sources {
			kids[i] = steps.Child{Workflow: "summarize", Input: url} // id "<run>-s<step>-<i>" by default
		}
		return steps.StartChildren(collect, r, kids...), nil
	}).Step("collect", func(_ context.Context, s *steps.Context, r Report) (steps.Outcome[Report], error) {
		ended, err := steps.ChildResults(s)
		if err != nil {
			return steps.Outcome[Report]{}, err
		}
		r.Words = len(ended)
		return steps.Complete(r), nil
	})
	res := step(wf, steps.ContextConfig{RunID: "b-1", Step: 1, StepName: "start"}, `{"sources":["u1","u2"]}`)
	fmt.Println(len(res.Children), res.Children[1].ID)
	// Output:
	// children collect {"sources":["u1","u2"]}
	// 2 b-1-s1-2
}

func ExampleWorkflow_Ref() {
	wf := steps.New[Report]("research", 1)
	publish := wf.Ref("publsh") // a typo
	wf.Step("draft", func(_ context.Context, _ *steps.Context, r Report) (steps.Outcome[Report], error) {
		return steps.Next(publish, r), nil
	}).Step("publish", func(_ context.Context, _ *steps.Context, r Report) (steps.Outcome[Report], error) {
		return steps.Complete(r), nil
	})
	// The worker refuses it at its start, before any run.
	err := steps.NewRegistry().Register(wf)
	fmt.Println(err)
	// Output:
	// workflow research: Ref("publsh") names no step (steps: [draft publish])
}

func ExampleCallNoted() {
	type answer struct {
		Text         string `json:"text"`
		InputTokens  int    `json:"input_tokens"`
		OutputTokens int    `json:"output_tokens"`
	}
	s := steps.NewContext(steps.ContextConfig{RunID: "r-1", Step: 2, Attempt: 1})
	// Call with a line for people: `durable runs show` prints it with the step.
	a, err := steps.CallNoted(context.Background(), s, "model", "summarize the claim", func(context.Context) (answer, error) {
		return answer{Text: "rear bumper, repairable", InputTokens: 812, OutputTokens: 95}, nil
	}, func(a answer) string { return fmt.Sprintf("model: %d+%d tokens", a.InputTokens, a.OutputTokens) })
	fmt.Println(a.Text, err)
	fmt.Println(s.Calls()[0].Note)
	// Output:
	// rear bumper, repairable <nil>
	// model: 812+95 tokens
}
