package dag

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sw4rm/sw4rm-temporal/protocol/schemas"
)

// References into JSON documents. A reference is an RFC 6901 JSON Pointer ("" is the whole
// document, "/a/b" the member b of the member a, "~1" in a token stands for "/" and "~0" for
// "~") or, for the plain keys of the spec's examples (000 §3.11.3: `parsed_records:
// "records"`), a string that does not start with "/", naming that top-level member as it is
// written (no escaping). "records" and "/records" are the same reference.
//
// The pointer code is written here rather than imported: writing needs the intermediate
// objects created on the way ("/build/artifact" into a document without "build"), and the
// write-conflict rule needs pointers compared token by token, which the Go pointer libraries
// do not offer.

// pointer is a parsed reference: its unescaped reference tokens.
type pointer []string

// parseRef parses a reference (see above).
func parseRef(s string) (pointer, error) {
	if s == "" {
		return pointer{}, nil
	}
	if s[0] != '/' {
		return pointer{s}, nil
	}
	parts := strings.Split(s[1:], "/")
	for i, p := range parts {
		if !strings.Contains(p, "~") {
			continue
		}
		// RFC 6901 §4: "~1" → "/", then "~0" → "~"; scanning once left to right does both
		// without turning "~01" into "/".
		var b strings.Builder
		for j := 0; j < len(p); j++ {
			if p[j] != '~' {
				b.WriteByte(p[j])
				continue
			}
			if j+1 < len(p) && p[j+1] == '0' {
				b.WriteByte('~')
			} else if j+1 < len(p) && p[j+1] == '1' {
				b.WriteByte('/')
			} else {
				return nil, fmt.Errorf("JSON Pointer %q: \"~\" must be followed by 0 or 1 (RFC 6901 §3)", short(s))
			}
			j++
		}
		parts[i] = b.String()
	}
	return pointer(parts), nil
}

// String renders the pointer in RFC 6901 form.
func (p pointer) String() string { return schemas.Pointer(p) }

// arrayIndex parses an RFC 6901 array index: "0" or digits without a leading zero.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 1 && tok[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(tok)
	return n, err == nil
}

// get resolves p in doc (decoded by decodeJSON). Found is false when a member or index does
// not exist or the path runs into a scalar.
func get(doc any, p pointer) (v any, found bool) {
	v = doc
	for _, tok := range p {
		switch c := v.(type) {
		case map[string]any:
			if v, found = c[tok]; !found {
				return nil, false
			}
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// set writes val at p inside doc and returns the new document. Missing members and null
// values on the way become objects; in arrays a token is an existing index, or "-" (RFC
// 6901 §4: the element after the last) as the last token, which appends.
func set(doc any, p pointer, val any) (any, error) {
	return setAt(doc, p, 0, val)
}

func setAt(cur any, p pointer, at int, val any) (any, error) {
	if at == len(p) {
		return val, nil
	}
	tok := p[at]
	switch c := cur.(type) {
	case nil:
		child, err := setAt(nil, p, at+1, val)
		if err != nil {
			return nil, err
		}
		return map[string]any{tok: child}, nil
	case map[string]any:
		child, err := setAt(c[tok], p, at+1, val)
		if err != nil {
			return nil, err
		}
		c[tok] = child
		return c, nil
	case []any:
		if tok == "-" {
			if at != len(p)-1 {
				return nil, fmt.Errorf("cannot write %s: \"-\" (append) must be the last token", p)
			}
			return append(c, val), nil
		}
		i, ok := arrayIndex(tok)
		if !ok || i >= len(c) {
			return nil, fmt.Errorf("cannot write %s: %s is an array of %d elements and %q is not one of its indices", p, p[:at], len(c), tok)
		}
		child, err := setAt(c[i], p, at+1, val)
		if err != nil {
			return nil, err
		}
		c[i] = child
		return c, nil
	default:
		return nil, fmt.Errorf("cannot write %s: %s is %s, not an object or array", p, p[:at], aKind(c))
	}
}

// aKind is jsonKind with its article: "a string", "an array".
func aKind(v any) string {
	k := jsonKind(v)
	if k == "array" || k == "object" {
		return "an " + k
	}
	return "a " + k
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// decodeJSON decodes one JSON value, keeping numbers exact (schemas.Decode).
func decodeJSON(b []byte) (any, error) { return schemas.Decode(b) }

// encodeJSON encodes v deterministically: object members sorted by key (encoding/json
// does), "<", ">" and "&" left as they are, no trailing newline.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Decoding and encoding bytes in memory is deterministic; workflowcheck flags encoding/json
	// only because its reflection reaches runtime internals.
	//workflowcheck:ignore
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
