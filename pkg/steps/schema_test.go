package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/durable-run/durable/pkg/steps"
)

// A schema in the subset older workers registered judges inputs as it
// did: the same inputs pass, the same are refused.
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
		{`{"count": 2.0}`, ""},
		{`{"count": 3, "ttl": "日本語"}`, ""},
		{`{}`, "(root): missing property 'count'"},
		{`{"count": 0}`, "/count: minimum: got 0, want 1"},
		{`{"count": 11}`, "/count: maximum: got 11, want 10"},
		{`{"count": 1.5}`, "/count: got number, want integer"},
		{`{"count": "3"}`, "/count: got string, want integer"},
		{`{"count": 3, "ttl": "h"}`, "/ttl: minLength: got 1, want 2"},
		{`{"count": 3, "ttl": "123456"}`, "/ttl: maxLength: got 6, want 5"},
		{`{"count": 3, "mode": "slow"}`, "/mode: value must be one of 'fast', 'safe'"},
		{`{"count": 3, "dry": "yes"}`, "/dry: got string, want boolean"},
		{`{"count": 3, "tags": {}}`, "/tags: got object, want array"},
		{`{"count": 3, "colour": "red"}`, "(root): additional properties 'colour' not allowed"},
		{`[1]`, "(root): got array, want object"},
	} {
		checkInput(t, schema, tc.input, tc.want)
	}
	if err := steps.CheckInput(nil, json.RawMessage(`{"anything": 1}`)); err != nil {
		t.Errorf("no schema: %v", err)
	}
	if err := steps.CheckInput(schema, json.RawMessage(`{bad`)); !errors.Is(err, steps.ErrInputSchema) || !strings.Contains(err.Error(), "input is not JSON") {
		t.Errorf("not JSON: %v", err)
	}
}

// checkInput fails t unless CheckInput refuses input with exactly want
// after the sentinel's text, or accepts it when want is "".
func checkInput(t *testing.T, schema json.RawMessage, input, want string) {
	t.Helper()
	err := steps.CheckInput(schema, json.RawMessage(input))
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", input, err)
	case want != "" && (!errors.Is(err, steps.ErrInputSchema) || err.Error() != steps.ErrInputSchema.Error()+": "+want):
		t.Errorf("%s: %v\nwant %s: %s", input, err, steps.ErrInputSchema, want)
	}
}

// The input of issue 25: items and minItems are enforced, formats
// asserted, and every violation is listed by its JSON pointer.
func TestCheckInputListsEveryViolation(t *testing.T) {
	wf := steps.New[struct{}]("research", 1).Step("a", complete).InputSchema(`{"type":"object","required":["sources"],"properties":{
		"sources":{"type":"array","minItems":1,"items":{"type":"string","format":"uri"}}},
		"patternProperties":{"^[a-h]$":{"type":"string"}}}`)
	if err := wf.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ input, want string }{
		{`{"sources":["https://a.example/x"]}`, ""},
		{`{"sources":[1,2]}`, "/sources/0: got number, want string; /sources/1: got number, want string"},
		{`{"sources":[]}`, "/sources: minItems: got 0, want 1"},
		{`{"sources":["not a uri"]}`, "/sources/0: 'not a uri' is not valid uri: relative url"},
		{`{}`, "(root): missing property 'sources'"},
		// By pointer: names in order, indexes in numeric order.
		{`{"sources":["https://a.example/x"], "h":1, "g":1, "f":1, "e":1, "d":1, "c":1, "b":1, "a":1}`,
			"/a: got number, want string; /b: got number, want string; /c: got number, want string; /d: got number, want string; " +
				"/e: got number, want string; /f: got number, want string; /g: got number, want string; /h: got number, want string"},
		{fmt.Sprintf(`{"sources":["https://a.example/x"%s, 7]}`, strings.Repeat(`, "https://a.example/x"`, 9)),
			"/sources/10: got number, want string"},
		{`{"sources":[true, "https://a.example/x", "x", 3, "https://a.example/x", "https://a.example/x", "https://a.example/x", "https://a.example/x", "https://a.example/x", "https://a.example/x", "", 9]}`,
			"/sources/0: got boolean, want string; /sources/2: 'x' is not valid uri: relative url; /sources/3: got number, want string; " +
				"/sources/10: '' is not valid uri: relative url; /sources/11: got number, want string"},
	} {
		checkInput(t, wf.Schema(), tc.input, tc.want)
	}
}

func complete(_ context.Context, _ *steps.Context, st struct{}) (steps.Outcome[struct{}], error) {
	return steps.Complete(st), nil
}

// A schema the validator cannot compile, or with a keyword it would
// ignore, is a definition error, found when the workflow is registered.
func TestInputSchemaRefused(t *testing.T) {
	for _, tc := range []struct{ schema, want string }{
		// The library's message.
		{`{"type": 5}`, `is not valid against metaschema: jsonschema validation failed with 'https://json-schema.org/draft/2020-12/schema#'`},
		{`{"type":"record"}`, `at '/type': value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'`},
		{`{"type":"string","pattern":"("}`, `at '/pattern': '(' is not valid regex`},
		{`{"$ref":"#/$defs/nope"}`, `json-pointer in "mem:///input-schema.json#/$defs/nope" not found`},
		{`{bad`, "invalid character 'b'"},
		// Nothing outside the schema.
		{`{"$ref":"https://schemas.example/input.json"}`, `failing loading "https://schemas.example/input.json": a reference outside the schema is not supported`},
		{`{"properties":{"a":{"$ref":"a.json"}}}`, `failing loading "mem:///a.json": a reference outside the schema is not supported`},
		{`{"$schema":"https://schemas.example/meta"}`, `failing loading "https://schemas.example/meta": a reference outside the schema is not supported`},
		// Keywords that would be ignored, named by their pointer.
		{`{"type":"object","properties":{"name":{"type":"string","minLenght":1}}}`, `/properties/name/minLenght: unknown keyword "minLenght"`},
		{`{"type":"array","minLength":1}`, "/minLength: minLength applies to string values only, and type is array"},
		{`{"type":"string","minItems":1}`, "/minItems: minItems applies to array values only, and type is string"},
		{`{"type":["string","null"],"minimum":1}`, "/minimum: minimum applies to number values only, and type is string or null"},
		{`{"type":"integer","format":"int32"}`, "/format: format applies to string values only, and type is integer"},
		{`{"type":"string","format":"url"}`, `/format: unknown format "url" (known: date, date-time,`},
		{`{"type":"array","additionalItems":false}`, "/additionalItems: additionalItems is not a keyword of JSON Schema 2020-12"},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","$defs":{}}`, "/$defs: $defs is not a keyword of JSON Schema draft-07"},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"s":{"type":"string"}},"$ref":"#/definitions/s","maxLength":2}`,
			"/maxLength: maxLength beside $ref is ignored in JSON Schema draft-07"},
		// Wherever a subschema can be.
		{`{"items":{"type":"object","properties":{"a":{"type":"array","pattern":"x"}}}}`, "/items/properties/a/pattern: pattern applies to string values only"},
		{`{"prefixItems":[true,{"mimimum":1}]}`, `/prefixItems/1/mimimum: unknown keyword "mimimum"`},
		{`{"anyOf":[{"type":"string"},{"type":"number","minLength":1}]}`, "/anyOf/1/minLength: minLength applies to string values only, and type is number"},
		{`{"$defs":{"a~b/c":{"typ":"string"}}}`, `/$defs/a~0b~1c/typ: unknown keyword "typ"`},
		{`{"if":{"required":["a"]},"then":{"type":"boolean","maxItems":1}}`, "/then/maxItems: maxItems applies to array values only"},
		{`{"patternProperties":{"^x":{"type":"null","uniqueItems":true}}}`, "/patternProperties/^x/uniqueItems: uniqueItems applies to array values only"},
		{`{"dependentSchemas":{"a":{"not":{"type":"string","minContains":1}}}}`, "/dependentSchemas/a/not/minContains: minContains applies to array values only"},
		{`{"propertyNames":{"maxlength":3}}`, `/propertyNames/maxlength: unknown keyword "maxlength"`},
		{`{"unevaluatedProperties":{"type":"string","minimum":0}}`, "/unevaluatedProperties/minimum: minimum applies to number values only"},
		{`{"contains":{"descripton":"x"}}`, `/contains/descripton: unknown keyword "descripton"`},
	} {
		err := steps.New[struct{}]("w", 1).InputSchema(tc.schema).Step("a", complete).Validate()
		if err == nil || !strings.Contains(err.Error(), "workflow w: input schema: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %q", tc.schema, err, tc.want)
		}
		if rerr := steps.NewRegistry().Register(steps.New[struct{}]("w", 1).InputSchema(tc.schema).Step("a", complete)); rerr == nil {
			t.Errorf("%s: registered", tc.schema)
		}
	}
}

// Schemas the subset accepted are accepted still, and so is the rest of
// JSON Schema: $ref within the schema, and the keywords the subset
// lacked.
func TestInputSchemaAccepted(t *testing.T) {
	for _, tc := range []struct {
		schema         string
		good, bad, why string
	}{
		// The demo workflows' schemas.
		{`{"type": "object", "additionalProperties": false, "properties": {
			"ttl": {"type": "string", "minLength": 2, "description": "how long to wait for the delivered signal, a Go duration, default 72h"}}}`,
			`{"ttl": "1h"}`, `{"ttl": "1"}`, "/ttl: minLength: got 1, want 2"},
		{`{"type": "object", "additionalProperties": false, "required": ["count"], "properties": {
			"count": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "child claims to start"},
			"amount": {"type": "integer", "minimum": 1, "description": "amount of each claim, default 1840"}}}`,
			`{"count": 2, "amount": 5}`, `{"amount": 0}`, "(root): missing property 'count'; /amount: minimum: got 0, want 1"},
		{`{"type": "object", "additionalProperties": false, "properties": {
			"branches": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "branches to run, default 8"}}}`,
			`{"branches": 8}`, `{"branches": 1001}`, "/branches: maximum: got 1,001, want 1,000"},
		{`{"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}}`, `{"n": 4}`, `{"n": 3}`, "/n: multipleOf: got 3, want 2"},
		{`{"type":"object","required":["n"]}`, `{"n": null}`, `{}`, "(root): missing property 'n'"},
		{`{"type":"object","properties":{"a":{"$ref":"#/$defs/name"}},"$defs":{"name":{"type":"string","minLength":1}}}`,
			`{"a": "x"}`, `{"a": ""}`, "/a: minLength: got 0, want 1"},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"}],"additionalItems":false}`,
			`["a"]`, `["a", 1]`, "(root): last 1 additionalItem(s) not allowed"},
		{`{"type":["string","null"],"format":"date","title":"due","examples":["2026-01-31"]}`, `null`, `"31/01/2026"`,
			`(root): '31/01/2026' is not valid date: parsing time "31/01/2026" as "2006-01-02": cannot parse "31/01/2026" as "2006"`},
	} {
		wf := steps.New[struct{}]("w", 1).InputSchema(tc.schema).Step("a", complete)
		if err := wf.Validate(); err != nil {
			t.Errorf("%s: %v", tc.schema, err)
			continue
		}
		checkInput(t, wf.Schema(), tc.good, "")
		checkInput(t, wf.Schema(), tc.bad, tc.why)
	}
	wf := steps.New[struct{}]("w", 1).InputSchema(`{"type": "object", "properties": {"n": {"type": "integer"}}}`).Step("a", complete)
	if err := wf.Validate(); err != nil || string(wf.Schema()) != `{"type":"object","properties":{"n":{"type":"integer"}}}` {
		t.Errorf("valid schema: %v, %s", err, wf.Schema())
	}
}
