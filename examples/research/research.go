package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// Research is a run's state: its input, then what the steps found.
type Research struct {
	Topic   string   `json:"topic"`
	Sources []string `json:"sources"`
	Pages   []Page   `json:"pages,omitempty"`
	Summary string   `json:"summary,omitempty"`
	Review  string   `json:"review,omitempty"`
}

// Page is one fetched source.
type Page struct {
	URL  string `json:"url"`
	Text string `json:"text"`
}

// schema is checked by `durable start` before a run exists: a bad input is
// refused with every violation, exit 2.
const schema = `{"type": "object", "required": ["topic", "sources"], "additionalProperties": false,
	"properties": {"topic": {"type": "string", "minLength": 1},
		"sources": {"type": "array", "minItems": 1, "maxItems": 20, "items": {"type": "string", "format": "uri"}}}}`

// research fetches every source in parallel (one branch each, keyed),
// has a child run summarize them, and waits up to reviewTTL for a person
// to send the "reviewed" signal.
func research(web *http.Client, reviewTTL time.Duration) *steps.Workflow[Research] {
	w := steps.New[Research]("research", 1).InputSchema(schema)
	read, summarize, review := w.Ref("read"), w.Ref("summarize"), w.Ref("review")
	reviewed := w.Signal("reviewed")
	fetch := steps.AddBranch(w, "fetch", func(ctx context.Context, s *steps.Context, url string) (Page, error) {
		// The key ("<run>:step2.<i>") goes to the source: a retry after a
		// crash asks again with the same key; a journaled answer is not asked again.
		return steps.Effect(ctx, s, "get", url, func(ctx context.Context, key string) (Page, error) {
			return get(ctx, web, url, key)
		})
	})
	w.Step("plan", func(_ context.Context, _ *steps.Context, r Research) (steps.Outcome[Research], error) {
		branches := make([]steps.Branch, len(r.Sources))
		for i, url := range r.Sources {
			branches[i] = fetch.With(url)
		}
		return steps.FanOut(read, r, branches...), nil
	}).Step("read", func(_ context.Context, s *steps.Context, r Research) (steps.Outcome[Research], error) {
		pages, err := fetch.Outputs(s)
		r.Pages = pages
		return steps.Next(summarize, r), err
	}).Step("summarize", func(_ context.Context, s *steps.Context, r Research) (steps.Outcome[Research], error) {
		ended, wait, err := steps.RunChildren(s, r, steps.Child{Workflow: "summarize", Input: r})
		if ended == nil {
			return wait, err
		}
		if ended[0].Status != checkpoint.StatusCompleted {
			return steps.Fail(r, "summarize "+string(ended[0].Status)+": "+ended[0].Error), nil
		}
		var child Research // the child's last state
		err = json.Unmarshal(ended[0].State, &child)
		r.Summary = child.Summary
		return steps.Next(review, r), err
	}).Step("review", func(_ context.Context, s *steps.Context, r Research) (steps.Outcome[Research], error) {
		sig, wait, err := steps.Recv(s, reviewed, reviewTTL)
		if sig == nil {
			return wait, err // parks, holding no worker; the run goes dead if nobody reviews in time
		}
		r.Review = string(sig.Data)
		return steps.Complete(r), nil
	})
	return w
}

// summarizer is the child workflow: it gets the research with its pages
// and ends with its Summary set.
func summarizer() *steps.Workflow[Research] {
	return steps.New[Research]("summarize", 1).
		Step("summarize", func(ctx context.Context, s *steps.Context, r Research) (steps.Outcome[Research], error) {
			// A model call, in real life: journaled, so a retry reads the answer back.
			text, err := steps.Call(ctx, s, "model", r.Topic, func(context.Context) (string, error) {
				return summary(r), nil
			})
			r.Summary, r.Pages = text, nil
			return steps.Complete(r), err
		})
}

// summary stands in for the model: how much was read, and from where.
func summary(r Research) string {
	words := 0
	for _, p := range r.Pages {
		words += len(strings.Fields(p.Text))
	}
	return fmt.Sprintf("%s: %d sources, %d words", r.Topic, len(r.Pages), words)
}

// get fetches url with the idempotency key, the first 2 KB of its body.
func get(ctx context.Context, web *http.Client, url, key string) (Page, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Page{}, steps.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := web.Do(req)
	if err != nil {
		return Page{}, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Page{}, fmt.Errorf("fetch %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 2048))
	return Page{URL: url, Text: string(body)}, err
}
