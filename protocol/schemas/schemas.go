// Package schemas holds what the protocol's pure packages share about JSON and JSON Schema:
// decoding one JSON value with exact numbers, compiling a self-contained schema without I/O,
// and rendering validation failures as sorted "<JSON Pointer>: <message>" lines. Everything
// here is deterministic, so workflow code may use it (tool arguments, negotiation drafts,
// DAG mappings are checked inside workflows and on replay).
package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// NotCompiled describes every compile failure that is not a metaschema violation. The
// compiler names whichever such problem it meets first in map order, so one fixed sentence
// keeps the answer the same on every run.
const NotCompiled = "it does not compile (an unresolvable or remote $ref, an invalid regular expression, or a duplicate $id or anchor)"

// Decode decodes exactly one JSON value, numbers kept exact (json.Number), refusing trailing
// data.
func Decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	// Decoding bytes in memory is deterministic; workflowcheck flags encoding/json only
	// because its reflection reaches runtime internals.
	//workflowcheck:ignore
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	//workflowcheck:ignore
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// offlineLoader refuses every URL: a $ref to anything but the schema itself or the standard
// metaschemas (which the library embeds) fails to compile, so compiling does no I/O and
// gives the same answer on every replay.
type offlineLoader struct{ what string }

// Load refuses url.
func (l offlineLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote reference %q is not loaded: %s must be self-contained", url, l.what)
}

// Compile compiles a decoded JSON Schema under the name url (never fetched), draft 2020-12
// unless its $schema says otherwise; what names the schemas in the refusal of a remote $ref
// (e.g. "tool schemas"). The compiler ranges over maps internally: whether a schema compiles
// does not depend on that order, but which problem its error names can — Problem renders
// it deterministically.
func Compile(url, what string, doc any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(offlineLoader{what: what})
	//workflowcheck:ignore
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	//workflowcheck:ignore
	return c.Compile(url)
}

// MetaschemaReasons returns the failures of a schema that breaks its metaschema, every
// failing keyword sorted; ok is false for any other compile error.
func MetaschemaReasons(err error) (reasons []string, ok bool) {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return Reasons(ve), true
		}
	}
	return nil, false
}

// Validate validates doc against s; reasons are the failures (Reasons), none when valid; err
// is a failure that is no validation error.
func Validate(s *jsonschema.Schema, doc any) (reasons []string, err error) {
	// Validation walks maps inside the library; whether it fails, and the set of leaf
	// failures, do not depend on that order, and the reasons are sorted.
	//workflowcheck:ignore
	verr := s.Validate(doc)
	if verr == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return nil, verr
	}
	return Reasons(ve), nil
}

// english renders the library's validation messages.
var english = message.NewPrinter(language.English)

// Reasons renders the leaves of a validation error tree as "<JSON Pointer>: <message>"
// ("(root)" for the whole document), sorted and without duplicates.
func Reasons(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, PointerOrRoot(e.InstanceLocation)+": "+kindMessage(e.ErrorKind))
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.Sort(out)
	return slices.Compact(out)
}

// kindMessage renders one failure. The names in an additionalProperties failure come in the
// instance's map order; they are sorted so the message is the same on every run.
func kindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case nil:
		return "validation failed"
	case *kind.AdditionalProperties:
		sorted := *k
		sorted.Properties = slices.Sorted(slices.Values(k.Properties))
		// Formatting a message in memory is deterministic; workflowcheck flags the printer
		// only because its reflection reaches runtime internals, as with fmt.
		//workflowcheck:ignore
		return sorted.LocalizedString(english)
	}
	//workflowcheck:ignore
	return k.LocalizedString(english)
}

// PointerOrRoot renders reference tokens as a JSON Pointer, or "(root)" when there are none.
func PointerOrRoot(tokens []string) string {
	if len(tokens) == 0 {
		return "(root)"
	}
	return Pointer(tokens)
}

// Pointer renders reference tokens as an RFC 6901 JSON Pointer ("~" as "~0", "/" as "~1").
func Pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// pointerEscaper escapes an RFC 6901 reference token.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// IsJSON reports whether a content type is JSON: application/json or any type ending in
// +json (RFC 6839), case-insensitive, parameters ignored.
func IsJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || (strings.HasSuffix(mt, "+json") && strings.Contains(mt, "/"))
}
