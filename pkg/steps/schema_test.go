package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/steps"
)

func TestCheckInput(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","additionalProperties":false,"required":["count"],"properties":{
		"count":{"type":"integer","minimum":1,"maximum":10},
		"ttl":{"type":"string","minLength":2,"maxLength":5},
		"mode":{"enum":["fast","safe"]},
		"dry":{"type":"boolean"},
		"tags":{"type":"array"}}}`)
	for _, tc := range []struct{ input, want string }{
		{`{"count": 3}`, ""},
		{`{"count": 10, "ttl": "72h", "mode": "safe", "dry": true, "tags": []}`, ""},
		{`{}`, "input.count is required"},
		{`{"count": 0}`, "want at least 1"},
		{`{"count": 11}`, "want at most 10"},
		{`{"count": 1.5}`, "whole number"},
		{`{"count": "3"}`, "must be a number"},
		{`{"count": 3, "ttl": "h"}`, "at least 2 characters"},
		{`{"count": 3, "ttl": "123456"}`, "at most 5 characters"},
		{`{"count": 3, "mode": "slow"}`, `want one of "fast", "safe"`},
		{`{"count": 3, "dry": "yes"}`, "true or false"},
		{`{"count": 3, "tags": {}}`, "must be an array"},
		{`{"count": 3, "colour": "red"}`, "input.colour is not a field of the input (its fields: count, dry, mode, tags, ttl)"},
		{`[1]`, "must be an object"},
	} {
		err := steps.CheckInput(schema, json.RawMessage(tc.input))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.input, err)
		case tc.want != "" && (!errors.Is(err, steps.ErrInputSchema) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.input, err, tc.want)
		}
	}
	if err := steps.CheckInput(nil, json.RawMessage(`{"anything": 1}`)); err != nil {
		t.Errorf("no schema: %v", err)
	}
}

// A schema outside the subset is a definition error, found when the
// workflow is registered: an ignored keyword would let bad input in.
func TestInputSchemaOutsideTheSubset(t *testing.T) {
	noop := func(_ context.Context, _ *steps.Context, st struct{}) (steps.Outcome[struct{}], error) {
		return steps.Complete(st), nil
	}
	for _, schema := range []string{
		`{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}`,
		`{"type":"record"}`,
		`{"type":"object","required":["n"]}`,
		`{bad`,
	} {
		err := steps.New[struct{}]("w", 1).InputSchema(schema).Step("a", noop).Validate()
		if err == nil || !strings.Contains(err.Error(), "input schema") {
			t.Errorf("%s: %v", schema, err)
		}
	}
	wf := steps.New[struct{}]("w", 1).InputSchema(`{"type": "object", "properties": {"n": {"type": "integer"}}}`).Step("a", noop)
	if err := wf.Validate(); err != nil || string(wf.Schema()) != `{"type":"object","properties":{"n":{"type":"integer"}}}` {
		t.Errorf("valid schema: %v, %s", err, wf.Schema())
	}
}
