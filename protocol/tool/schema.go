package tool

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

// schemaURL is the name under which a schema is compiled; it is never fetched.
const schemaURL = "urn:sw4rm:tool:schema"

// offlineLoader refuses every URL, so that a schema's $ref to anything but itself or the
// standard metaschemas (which the library embeds) fails to compile: validation does no I/O
// and gives the same answer on every replay.
type offlineLoader struct{}

// Load refuses url.
func (offlineLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("remote reference %q is not loaded: tool schemas must be self-contained", url)
}

// english renders the library's validation messages.
var english = message.NewPrinter(language.English)

// compileSchema decodes and compiles a JSON Schema (draft 2020-12 unless its $schema says
// otherwise, as MCP specifies for tool schemas).
func compileSchema(src string) (*jsonschema.Schema, error) {
	doc, err := decodeJSON([]byte(src))
	if err != nil {
		return nil, fmt.Errorf("it is not JSON: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		// true and false are schemas to the library, but a tool schema says something about
		// an object; a bare boolean is almost certainly a mistake.
		return nil, errors.New("it is not a JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(offlineLoader{})
	// The compiler ranges over maps internally; whether a schema compiles does not depend on
	// that order, and compileProblem names the problem deterministically.
	//workflowcheck:ignore
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, errors.New(compileProblem(err))
	}
	//workflowcheck:ignore
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, errors.New(compileProblem(err))
	}
	return s, nil
}

// compileProblem renders a compile error deterministically: a schema that breaks its
// metaschema by every failing keyword, sorted; anything else by one fixed sentence, because
// with several such problems the compiler names whichever it meets first in map order.
func compileProblem(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return "it breaks its metaschema: " + strings.Join(leafReasons(ve), "; ")
		}
	}
	return "it does not compile (an unresolvable or remote $ref, an invalid regular expression, or a duplicate $id or anchor)"
}

// validateWith validates doc against s: the failures, one per failing leaf, sorted.
func validateWith(s *jsonschema.Schema, doc any) []string {
	// Validation walks maps inside the library; the set of leaf failures does not depend on
	// that order, and the reasons are sorted.
	//workflowcheck:ignore
	verr := s.Validate(doc)
	if verr == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(verr, &ve) {
		return []string{"(root): " + verr.Error()}
	}
	return leafReasons(ve)
}

// leafReasons renders the leaves of a validation error tree as "<JSON Pointer>: <message>"
// ("(root)" for the whole document), sorted and without duplicates.
func leafReasons(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, pointerOrRoot(e.InstanceLocation)+": "+kindMessage(e.ErrorKind))
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

// kindMessage renders one failure; the property names of an additionalProperties failure
// come in map order and are sorted first.
func kindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case nil:
		return "validation failed"
	case *kind.AdditionalProperties:
		sorted := *k
		sorted.Properties = slices.Sorted(slices.Values(k.Properties))
		// Formatting in memory is deterministic; workflowcheck flags the printer only
		// because its reflection reaches runtime internals.
		//workflowcheck:ignore
		return sorted.LocalizedString(english)
	}
	//workflowcheck:ignore
	return k.LocalizedString(english)
}

func pointerOrRoot(tokens []string) string {
	if len(tokens) == 0 {
		return "(root)"
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// pointerEscaper escapes an RFC 6901 reference token.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// decodeJSON decodes exactly one JSON value, numbers kept exact, refusing trailing data.
func decodeJSON(b []byte) (any, error) {
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

// IsJSON reports whether a content type is JSON: application/json or any type ending in
// +json (RFC 6839), case-insensitive, parameters ignored.
func IsJSON(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || (strings.HasSuffix(mt, "+json") && strings.Contains(mt, "/"))
}
