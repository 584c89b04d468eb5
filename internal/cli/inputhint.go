package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/durable-run/durable/pkg/checkpoint"
	"github.com/durable-run/durable/pkg/steps"
)

// inputHint completes the error of a start whose --input is not a JSON
// object with what the workflow takes: an input its registered schema
// accepts, quoted for the shell, and the schema's properties; or that it
// declares no schema. It names nothing of another workflow, and says
// nothing when the workflows cannot be read or no worker registered this
// one (the start says so once the input parses).
func inputHint(ctx context.Context, store checkpoint.Registry, workflow string) string {
	infos, err := store.Workflows(ctx)
	if err != nil {
		return ""
	}
	var info *checkpoint.WorkflowInfo
	for i, in := range infos {
		if in.Name == workflow && (info == nil || in.Version > info.Version) {
			info = &infos[i]
		}
	}
	if info == nil {
		return ""
	}
	if len(info.InputSchema) == 0 {
		return fmt.Sprintf("; workflow %s declares no input schema: any JSON object, quoted for the shell, e.g. --input '{}'", workflow)
	}
	var schema map[string]any
	if json.Unmarshal(info.InputSchema, &schema) != nil {
		return ""
	}
	props := describeProperties(schema)
	example, ok := schemaExample(info.InputSchema, schema)
	if !ok {
		if props == "" {
			return fmt.Sprintf("; workflow %s v%d takes a JSON object that matches its input schema %s", workflow, info.Version, cut(string(info.InputSchema), 400))
		}
		return fmt.Sprintf("; workflow %s v%d takes a JSON object with %s", workflow, info.Version, props)
	}
	hint := fmt.Sprintf("; workflow %s v%d takes e.g. --input %s", workflow, info.Version, shellQuote(example))
	if props != "" {
		hint += " (its input schema's properties: " + props + ")"
	}
	return hint
}

// schemaExample returns an input that schema accepts, built from its
// properties' examples, defaults, enums, bounds and formats: with every
// property, else with the required ones only. It is checked against the
// schema as a start checks an input, so a hint never suggests one the
// start refuses.
func schemaExample(raw json.RawMessage, schema map[string]any) (string, bool) {
	for _, all := range []bool{true, false} {
		v, ok := exampleObject(schema, all, 0)
		if !ok {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil || steps.CheckInput(raw, b) != nil {
			continue
		}
		return string(b), true
	}
	return "", false
}

// exampleObject builds an object of schema's properties (every one, or
// the required ones).
func exampleObject(schema map[string]any, all bool, depth int) (map[string]any, bool) {
	if depth > 4 {
		return nil, false
	}
	props, _ := schema["properties"].(map[string]any)
	out := map[string]any{}
	for _, name := range propertyNames(schema) {
		if !all && !slices.Contains(required(schema), name) {
			continue
		}
		sub, _ := props[name].(map[string]any)
		v, ok := exampleValue(sub, all, depth+1)
		if !ok {
			return nil, false
		}
		out[name] = v
	}
	return out, true
}

// exampleValue is a value schema accepts, or false when it cannot tell.
func exampleValue(s map[string]any, all bool, depth int) (any, bool) {
	if ex, ok := s["examples"].([]any); ok && len(ex) > 0 {
		return ex[0], true
	}
	for _, k := range []string{"const", "default"} {
		if v, ok := s[k]; ok {
			return v, true
		}
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		return enum[0], true
	}
	switch schemaType(s) {
	case "integer", "number":
		return exampleNumber(s), true
	case "string":
		return exampleString(s)
	case "boolean":
		return false, true
	case "array":
		items, _ := s["items"].(map[string]any)
		v, ok := exampleValue(items, all, depth+1)
		if !ok || items == nil {
			return []any{}, true
		}
		return slices.Repeat([]any{v}, max(1, int(number(s, "minItems", 0)))), true
	case "object":
		return exampleObject(s, all, depth)
	}
	return nil, false
}

func exampleNumber(s map[string]any) float64 {
	if m, ok := s["minimum"].(float64); ok {
		return m
	}
	if m, ok := s["exclusiveMinimum"].(float64); ok {
		return m + 1
	}
	if m, ok := s["maximum"].(float64); ok && m < 1 {
		return m
	}
	return 1
}

// formatExamples are values of the formats a schema is likely to assert.
var formatExamples = map[string]string{
	"date-time": "2026-01-02T15:04:05Z", "date": "2026-01-02", "time": "15:04:05Z", "duration": "PT1H",
	"email": "ops@example.com", "uri": "https://example.com/", "hostname": "example.com",
	"ipv4": "192.0.2.1", "uuid": "123e4567-e89b-42d3-a456-426614174000",
}

// exampleString is a value of s's format; none for free text, whose
// meaning only the description tells (a made-up "xxxx" would pass the
// schema and fail the run).
func exampleString(s map[string]any) (string, bool) {
	f, _ := s["format"].(string)
	v, ok := formatExamples[f]
	return v, ok
}

// describeProperties lists schema's properties as "name type[, required]:
// description", the required ones first.
func describeProperties(schema map[string]any) string {
	props, _ := schema["properties"].(map[string]any)
	var parts []string
	for _, name := range propertyNames(schema) {
		sub, _ := props[name].(map[string]any)
		p := name + " " + cmp.Or(schemaType(sub), "any")
		if slices.Contains(required(schema), name) {
			p += ", required"
		}
		if d, _ := sub["description"].(string); d != "" {
			p += ": " + cut(d, 80)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// propertyNames are schema's properties, the required ones first in
// their order, then the others by name.
func propertyNames(schema map[string]any) []string {
	props, _ := schema["properties"].(map[string]any)
	var names, rest []string
	for _, r := range required(schema) {
		if _, ok := props[r]; ok {
			names = append(names, r)
		}
	}
	for name := range props {
		if !slices.Contains(names, name) {
			rest = append(rest, name)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

func required(schema map[string]any) []string {
	var out []string
	rs, _ := schema["required"].([]any)
	for _, r := range rs {
		if s, ok := r.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// schemaType is a subschema's "type", the first other than "null" of a
// list.
func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if x, ok := x.(string); ok && x != "null" {
				return x
			}
		}
	}
	return ""
}

func number(s map[string]any, key string, def float64) float64 {
	if v, ok := s[key].(float64); ok {
		return v
	}
	return def
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
