package steps

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A keyword the validator would ignore lets bad input through, so
// InputSchema refuses it. The library compiles any schema its metaschema
// allows, and the metaschema allows every unknown keyword: this table is
// what tells a typo from a keyword.

// drafts the library supports, by the mark in their "$schema" URL; the
// number is the library's Schema.DraftVersion.
type draft struct {
	mark    string
	version int
}

var drafts = []draft{{"draft-04", 4}, {"draft-06", 6}, {"draft-07", 7}, {"2019-09", 2019}, {"2020-12", 2020}}

// keyword is what the walk knows of one keyword.
type keyword struct {
	on    string // the type it applies to ("number" covers integer); "" every type
	sub   subKind
	from  int  // the first draft that has it; 0: draft-04
	until int  // the last draft that has it; 0: the latest
	note  bool // validates nothing (an annotation, or a home for $ref targets)
}

// subKind says where a keyword's subschemas are.
type subKind int

const (
	subNone   subKind = iota
	subSchema         // the value is a schema or a list of schemas
	subMap            // the value maps names to schemas
)

var keywords = map[string]keyword{
	"$schema": {note: true}, "id": {note: true, until: 4}, "$id": {note: true, from: 6},
	"$ref": {}, "$comment": {note: true, from: 7}, "$vocabulary": {note: true, from: 2019},
	"$defs": {note: true, sub: subMap, from: 2019}, "definitions": {note: true, sub: subMap},
	"$anchor": {note: true, from: 2019}, "$dynamicAnchor": {note: true, from: 2020}, "$dynamicRef": {from: 2020},
	"$recursiveAnchor": {note: true, from: 2019, until: 2019}, "$recursiveRef": {from: 2019, until: 2019},
	"title": {note: true}, "description": {note: true}, "default": {note: true}, "examples": {note: true, from: 6},
	"deprecated": {note: true, from: 2019}, "readOnly": {note: true, from: 7}, "writeOnly": {note: true, from: 7},
	"contentEncoding": {note: true, from: 7}, "contentMediaType": {note: true, from: 7},
	"contentSchema": {note: true, sub: subSchema, from: 2019},

	"type": {}, "enum": {}, "const": {from: 6},
	"allOf": {sub: subSchema}, "anyOf": {sub: subSchema}, "oneOf": {sub: subSchema}, "not": {sub: subSchema},
	"if": {sub: subSchema, from: 7}, "then": {sub: subSchema, from: 7}, "else": {sub: subSchema, from: 7},

	"multipleOf": {on: "number"}, "minimum": {on: "number"}, "maximum": {on: "number"},
	"exclusiveMinimum": {on: "number"}, "exclusiveMaximum": {on: "number"},

	"minLength": {on: "string"}, "maxLength": {on: "string"}, "pattern": {on: "string"}, "format": {on: "string"},

	"items": {on: "array", sub: subSchema}, "prefixItems": {on: "array", sub: subSchema, from: 2020},
	"additionalItems": {on: "array", sub: subSchema, until: 2019}, "unevaluatedItems": {on: "array", sub: subSchema, from: 2019},
	"contains": {on: "array", sub: subSchema, from: 6}, "minContains": {on: "array", from: 2019}, "maxContains": {on: "array", from: 2019},
	"minItems": {on: "array"}, "maxItems": {on: "array"}, "uniqueItems": {on: "array"},

	"properties": {on: "object", sub: subMap}, "patternProperties": {on: "object", sub: subMap},
	"additionalProperties": {on: "object", sub: subSchema}, "unevaluatedProperties": {on: "object", sub: subSchema, from: 2019},
	"propertyNames": {on: "object", sub: subSchema, from: 6}, "required": {on: "object"},
	"minProperties": {on: "object"}, "maxProperties": {on: "object"}, "dependencies": {on: "object", sub: subMap},
	"dependentRequired": {on: "object", from: 2019}, "dependentSchemas": {on: "object", sub: subMap, from: 2019},
}

// formats are the values of "format" the library checks; another would
// check nothing.
var formats = []string{"date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "iri", "iri-reference",
	"json-pointer", "period", "regex", "relative-json-pointer", "semver", "time", "uri", "uri-reference", "uri-template", "uuid"}

// ignoredKeywords lists, by the JSON pointer of each, the keywords of doc
// (a compiled schema) the validator would ignore.
func ignoredKeywords(doc any) error {
	d := draftOf(doc)
	var found []string
	var walk func(s any, at []string)
	walk = func(s any, at []string) {
		obj, ok := s.(map[string]any) // else true or false
		if !ok {
			return
		}
		for _, name := range slices.Sorted(maps.Keys(obj)) {
			here := append(at[:len(at):len(at)], name)
			if why := ignored(obj, name, d); why != "" {
				found = append(found, pointer(here, "")+": "+why)
				continue
			}
			switch v := obj[name]; keywords[name].sub {
			case subSchema:
				if list, ok := v.([]any); ok {
					for i, item := range list {
						walk(item, append(here, fmt.Sprint(i)))
					}
				} else {
					walk(v, here)
				}
			case subMap:
				m, _ := v.(map[string]any)
				for _, k := range slices.Sorted(maps.Keys(m)) {
					walk(m[k], append(here, k))
				}
			}
		}
	}
	walk(doc, nil)
	if len(found) > 0 {
		return errors.New(strings.Join(found, "; "))
	}
	return nil
}

// draftOf is the draft the root's "$schema" names, 2020-12 by default.
func draftOf(doc any) draft {
	root, _ := doc.(map[string]any)
	uri, _ := root["$schema"].(string)
	if i := slices.IndexFunc(drafts, func(d draft) bool { return strings.Contains(uri, d.mark) }); i >= 0 {
		return drafts[i]
	}
	return drafts[len(drafts)-1]
}

// ignored says why the validator would ignore keyword name of schema obj
// in draft d, "" when it would not.
func ignored(obj map[string]any, name string, d draft) string {
	k, ok := keywords[name]
	_, besideRef := obj["$ref"]
	types := declaredTypes(obj["type"])
	format, _ := obj["format"].(string)
	switch {
	case !ok:
		return fmt.Sprintf("unknown keyword %q", name)
	case d.version < k.from || k.until != 0 && d.version > k.until:
		return fmt.Sprintf("%s is not a keyword of JSON Schema %s", name, d.mark)
	case besideRef && d.version < 2019 && !k.note && name != "$ref":
		return fmt.Sprintf("%s beside $ref is ignored in JSON Schema %s", name, d.mark)
	case k.on != "" && len(types) > 0 && !slices.Contains(types, k.on) && !(k.on == "number" && slices.Contains(types, "integer")):
		return fmt.Sprintf("%s applies to %s values only, and type is %s", name, k.on, strings.Join(types, " or "))
	case name == "format" && !slices.Contains(formats, format):
		return fmt.Sprintf("unknown format %q (known: %s)", format, strings.Join(formats, ", "))
	}
	return ""
}

// declaredTypes reads the value of "type": nil when absent.
func declaredTypes(v any) []string {
	if t, ok := v.(string); ok {
		return []string{t}
	}
	list, _ := v.([]any)
	types := make([]string, 0, len(list))
	for _, t := range list {
		if s, ok := t.(string); ok {
			types = append(types, s)
		}
	}
	return types
}
