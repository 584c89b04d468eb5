package steps

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// InputSchema declares what a run's input must be: a JSON Schema, draft
// 2020-12 unless its "$schema" names another draft (4, 6, 7, 2019-09).
// Every keyword of the draft is enforced, "format" included (the content
// keywords stay annotations); "$ref" may point anywhere inside the schema
// ("#/$defs/name") but not outside it: no file or URL is ever loaded.
// Workers register the schema with the workflow, and `durable start`
// (client.Start) refuses an input that does not match, listing each
// violation, with no run created, instead of a run that fails at its
// first step.
//
// A schema that does not compile is a definition error, and so is a
// keyword that would be ignored: an unknown one (a typo such as
// "minLenght"), one the draft does not have, one that applies only to a
// type the subschema's "type" excludes ("minLength" under "type":
// "array"), or a format the validator does not know. An ignored keyword
// would let bad input through. The error names each by its JSON pointer.
func (w *Workflow[S]) InputSchema(schema string) *Workflow[S] {
	var buf bytes.Buffer
	err := json.Compact(&buf, []byte(schema))
	if err == nil {
		err = checkSchema(buf.Bytes())
	}
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("workflow %s: input schema: %w", w.name, err))
		return w
	}
	w.schema = buf.Bytes()
	return w
}

// Schema returns the input schema the workflow declared, or nil.
func (w *Workflow[S]) Schema() json.RawMessage { return w.schema }

// checkSchema compiles raw and refuses the keywords it would ignore.
func checkSchema(raw []byte) error {
	if _, err := compileSchema(raw); err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return ignoredKeywords(doc)
}

// ErrInputSchema: a run input does not match its workflow's input schema.
var ErrInputSchema = errors.New("input does not match the workflow's input schema")

// CheckInput reports how input does not match schema (nil schema: any
// input matches): an error wrapping ErrInputSchema that lists every
// violation by the JSON pointer of the offending value, such as
// "/sources/0: got number, want string". The client calls it when a run
// starts, with the schema the workflow's workers registered.
func CheckInput(schemaJSON, input json.RawMessage) error {
	if len(schemaJSON) == 0 {
		return nil
	}
	sch, err := compileSchema(schemaJSON)
	if err != nil {
		return fmt.Errorf("the workflow's input schema: %w", err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return fmt.Errorf("%w: input is not JSON: %v", ErrInputSchema, err)
	}
	err = sch.Validate(v)
	var verr *jsonschema.ValidationError
	if errors.As(err, &verr) {
		return fmt.Errorf("%w: %s", ErrInputSchema, strings.Join(violations(verr), "; "))
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInputSchema, err)
	}
	return nil
}

// schemaURL names the schema being compiled. Relative references resolve
// against it to URLs the loader refuses.
const schemaURL = "mem:///input-schema.json"

// refuseLoader is the compiler's loader: a schema refers only within
// itself, so a start never waits on (or trusts) the network or a file.
type refuseLoader struct{}

func (refuseLoader) Load(string) (any, error) {
	return nil, errors.New("a reference outside the schema is not supported: put the subschema under $defs and refer to it as #/$defs/NAME")
}

// compiled holds the schemas compiled so far, by their bytes, so a start
// does not compile its workflow's schema again. Bounded: a fleet has a
// few dozen workflow versions, not thousands.
var compiled = struct {
	sync.Mutex
	m map[string]*jsonschema.Schema
}{m: map[string]*jsonschema.Schema{}}

const compiledMax = 256

func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	key := string(raw)
	compiled.Lock()
	sch, ok := compiled.m[key]
	compiled.Unlock()
	if ok {
		return sch, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	if sch, err = c.Compile(schemaURL); err != nil {
		return nil, err
	}
	compiled.Lock()
	defer compiled.Unlock()
	if len(compiled.m) >= compiledMax {
		for k := range compiled.m {
			delete(compiled.m, k)
			break
		}
	}
	compiled.m[key] = sch
	return sch, nil
}

// printer words the library's messages, in English as its own Error does.
var printer = message.NewPrinter(language.English)

type violation struct {
	at  []string // instance location, JSON pointer tokens
	why string
}

// violations lists each failed keyword of e as "pointer: why", ordered by
// pointer. The containers that only say "validation failed" are left out:
// their causes say what.
func violations(e *jsonschema.ValidationError) []string {
	var all []violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 || !onlySaysFailed(e.ErrorKind) {
			all = append(all, violation{e.InstanceLocation, e.ErrorKind.LocalizedString(printer)})
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	slices.SortFunc(all, func(a, b violation) int {
		if c := comparePointers(a.at, b.at); c != 0 {
			return c
		}
		return strings.Compare(a.why, b.why)
	})
	lines := make([]string, 0, len(all))
	for _, v := range all {
		lines = append(lines, pointer(v.at, "(root)")+": "+v.why)
	}
	return slices.Compact(lines)
}

// onlySaysFailed: k wraps other errors, saying only "validation failed".
func onlySaysFailed(k jsonschema.ErrorKind) bool {
	switch k.(type) {
	case *kind.Schema, *kind.Group, *kind.Reference:
		return true
	}
	return false
}

// comparePointers orders array indexes as numbers: /a/2 before /a/10.
func comparePointers(a, b []string) int {
	for i := range min(len(a), len(b)) {
		x, xerr := strconv.Atoi(a[i])
		y, yerr := strconv.Atoi(b[i])
		c := strings.Compare(a[i], b[i])
		if xerr == nil && yerr == nil {
			c = x - y
		}
		if c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

// pointer writes tokens as a JSON pointer (RFC 6901), root for none.
func pointer(tokens []string, root string) string {
	if len(tokens) == 0 {
		return root
	}
	var b strings.Builder
	esc := strings.NewReplacer("~", "~0", "/", "~1")
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(esc.Replace(t))
	}
	return b.String()
}
