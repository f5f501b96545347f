package tool

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sw4rm/sw4rm-temporal/protocol/schemas"
)

// schemaURL is the name under which a schema is compiled; it is never fetched.
const schemaURL = "urn:sw4rm:tool:schema"

// compileSchema decodes and compiles a JSON Schema without I/O (draft 2020-12 unless its
// $schema says otherwise, as MCP specifies for tool schemas; schemas.Compile).
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
	s, err := schemas.Compile(schemaURL, "tool schemas", doc)
	if err != nil {
		return nil, errors.New(compileProblem(err))
	}
	return s, nil
}

// compileProblem renders a compile error deterministically: a schema that breaks its
// metaschema by every failing keyword, sorted; anything else by schemas.NotCompiled.
func compileProblem(err error) string {
	if reasons, ok := schemas.MetaschemaReasons(err); ok {
		return "it breaks its metaschema: " + strings.Join(reasons, "; ")
	}
	return schemas.NotCompiled
}

// validateWith validates doc against s: the failures, one per failing leaf, sorted.
func validateWith(s *jsonschema.Schema, doc any) []string {
	reasons, err := schemas.Validate(s, doc)
	if err != nil {
		return []string{"(root): " + err.Error()}
	}
	return reasons
}

// decodeJSON decodes exactly one JSON value, numbers kept exact (schemas.Decode).
func decodeJSON(b []byte) (any, error) { return schemas.Decode(b) }

// IsJSON reports whether a content type is JSON: application/json or any type ending in
// +json (RFC 6839), case-insensitive, parameters ignored.
func IsJSON(contentType string) bool { return schemas.IsJSON(contentType) }
