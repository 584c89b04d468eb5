package steps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// InputSchema declares what a run's input must be: a JSON Schema in a
// small subset (type object, integer, number, string, boolean, array;
// properties, required, additionalProperties false, minimum, maximum,
// minLength, maxLength, enum). Workers register it with the workflow, and
// `durable start` (client.Start) refuses an input that does not match,
// with the reason and no run created, instead of a run that fails at its
// first step. A schema outside the subset is a definition error: a
// keyword that would be ignored would let bad input through.
func (w *Workflow[S]) InputSchema(schema string) *Workflow[S] {
	if err := checkSchema(json.RawMessage(schema)); err != nil {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: input schema: %w", w.name, err))
		return w
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, []byte(schema))
	w.schema = buf.Bytes()
	return w
}

// Schema returns the input schema the workflow declared, or nil.
func (w *Workflow[S]) Schema() json.RawMessage { return w.schema }

// schema is the supported subset of JSON Schema.
type schema struct {
	Type                 string             `json:"type,omitempty"`
	Properties           map[string]*schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	MinLength            *int               `json:"minLength,omitempty"`
	MaxLength            *int               `json:"maxLength,omitempty"`
	Enum                 []json.RawMessage  `json:"enum,omitempty"`
	Description          string             `json:"description,omitempty"`
}

func parseSchema(raw json.RawMessage) (*schema, error) {
	var s schema
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w (supported: type, properties, required, additionalProperties, minimum, maximum, minLength, maxLength, enum, description)", err)
	}
	return &s, nil
}

func checkSchema(raw json.RawMessage) error {
	s, err := parseSchema(raw)
	if err != nil {
		return err
	}
	return s.check("input")
}

func (s *schema) check(at string) error {
	switch s.Type {
	case "object", "integer", "number", "string", "boolean", "array", "":
	default:
		return fmt.Errorf("%s: type %q: want object, integer, number, string, boolean or array", at, s.Type)
	}
	for name, p := range s.Properties {
		if p == nil {
			return fmt.Errorf("%s.%s: empty schema", at, name)
		}
		if err := p.check(at + "." + name); err != nil {
			return err
		}
	}
	for _, r := range s.Required {
		if _, ok := s.Properties[r]; !ok {
			return fmt.Errorf("%s: required %q is not among the properties", at, r)
		}
	}
	return nil
}

// ErrInputSchema: a run input does not match its workflow's input schema.
var ErrInputSchema = errors.New("input does not match the workflow's input schema")

// CheckInput reports how input does not match schema (nil schema: any
// input matches). The client calls it when a run starts.
func CheckInput(schemaJSON, input json.RawMessage) error {
	if len(schemaJSON) == 0 {
		return nil
	}
	s, err := parseSchema(schemaJSON)
	if err != nil {
		return fmt.Errorf("the workflow's input schema: %w", err)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %v", ErrInputSchema, err)
	}
	if why := s.mismatch("input", v); why != "" {
		return fmt.Errorf("%w: %s", ErrInputSchema, why)
	}
	return nil
}

// mismatch says how v does not match s at path, "" when it does.
func (s *schema) mismatch(at string, v any) string {
	if len(s.Enum) > 0 {
		enc, _ := json.Marshal(v)
		if !slices.ContainsFunc(s.Enum, func(e json.RawMessage) bool { return jsonSame(e, enc) }) {
			return fmt.Sprintf("%s is %s, want one of %s", at, enc, joinRaw(s.Enum))
		}
	}
	switch s.Type {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s must be an object", at)
		}
		return s.objectMismatch(at, m)
	case "integer", "number":
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Sprintf("%s must be a number", at)
		}
		f, err := n.Float64()
		if err != nil {
			return fmt.Sprintf("%s: %v", at, err)
		}
		if s.Type == "integer" && f != math.Trunc(f) {
			return fmt.Sprintf("%s is %s, want a whole number", at, n)
		}
		if s.Minimum != nil && f < *s.Minimum {
			return fmt.Sprintf("%s is %s, want at least %v", at, n, *s.Minimum)
		}
		if s.Maximum != nil && f > *s.Maximum {
			return fmt.Sprintf("%s is %s, want at most %v", at, n, *s.Maximum)
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Sprintf("%s must be a string", at)
		}
		if s.MinLength != nil && len([]rune(str)) < *s.MinLength {
			return fmt.Sprintf("%s must be at least %d characters", at, *s.MinLength)
		}
		if s.MaxLength != nil && len([]rune(str)) > *s.MaxLength {
			return fmt.Sprintf("%s must be at most %d characters", at, *s.MaxLength)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("%s must be true or false", at)
		}
	case "array":
		if _, ok := v.([]any); !ok {
			return fmt.Sprintf("%s must be an array", at)
		}
	}
	return ""
}

func (s *schema) objectMismatch(at string, m map[string]any) string {
	for _, r := range s.Required {
		if _, ok := m[r]; !ok {
			return fmt.Sprintf("%s.%s is required", at, r)
		}
	}
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p, ok := s.Properties[k]
		if !ok {
			if s.AdditionalProperties != nil && !*s.AdditionalProperties {
				known := make([]string, 0, len(s.Properties))
				for name := range s.Properties {
					known = append(known, name)
				}
				sort.Strings(known)
				return fmt.Sprintf("%s.%s is not a field of the input (its fields: %s)", at, k, strings.Join(known, ", "))
			}
			continue
		}
		if why := p.mismatch(at+"."+k, m[k]); why != "" {
			return why
		}
	}
	return ""
}

func jsonSame(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && fmt.Sprint(x) == fmt.Sprint(y)
}

func joinRaw(list []json.RawMessage) string {
	parts := make([]string, len(list))
	for i, r := range list {
		parts[i] = string(r)
	}
	return strings.Join(parts, ", ")
}
