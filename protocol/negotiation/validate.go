package negotiation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/schemas"
)

// ErrInvalidConfig is wrapped by ParseConfig's refusals: a schema that is not JSON or does not
// compile, examples that are not a JSON array of {name, instance, valid}.
var ErrInvalidConfig = errors.New("invalid negotiation validation config")

// MaxReasons bounds Check.Reasons: past it one last reason says how many more failures there
// were, so that a draft with thousands of errors does not bloat the workflow history.
const MaxReasons = 64

// Config is a negotiation's validation setup (§17.3: "early validation of proposals using JSON
// Schema and executable examples"), from Open's metadata (wire.NegotiationSchemaKey, wire.NegotiationExamplesKey). It is
// plain data, so it travels in workflow inputs; Validate compiles the schema when it runs.
type Config struct {
	// Schema is a JSON Schema every JSON draft must satisfy (draft 2020-12 unless its
	// $schema says otherwise); nil means none.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Examples are the executable examples; nil means none.
	Examples []Example `json:"examples,omitempty"`
}

// Example is an instance the draft — itself a JSON Schema contract — must accept (Valid) or
// reject (!Valid). "Executable examples" (§17.3) are run by validating each instance against
// the draft.
type Example struct {
	// Name identifies the example in reasons; unique within a Config.
	Name string `json:"name"`
	// Instance is the JSON instance the draft is run on.
	Instance json.RawMessage `json:"instance"`
	// Valid is whether the draft must accept the instance.
	Valid bool `json:"valid"`
}

// ParseConfig parses Open's schema and examples metadata (either may be empty: none) and
// compiles the schema, so that a bad configuration is refused at Open, not at the first draft.
// It refuses (ErrInvalidConfig) a schema that is not JSON or does not compile (the reasons
// point into the schema with JSON Pointers), remote $refs (nothing is fetched: validation must
// be deterministic), examples that are not a JSON array of objects {name, instance, valid}
// with all three present and nothing else, and duplicate example names.
func ParseConfig(schema, examples []byte) (Config, error) {
	var cfg Config
	if len(bytes.TrimSpace(schema)) > 0 {
		doc, err := decodeJSON(schema)
		if err != nil {
			return Config{}, fmt.Errorf("%w: the schema is not JSON: %v", ErrInvalidConfig, err)
		}
		if _, err := compileSchema(doc); err != nil {
			return Config{}, fmt.Errorf("%w: the schema does not compile: %s", ErrInvalidConfig, compileDetail(err))
		}
		cfg.Schema = slices.Clone(json.RawMessage(bytes.TrimSpace(schema)))
	}
	if len(bytes.TrimSpace(examples)) > 0 {
		exs, err := parseExamples(examples)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
		cfg.Examples = exs
	}
	return cfg, nil
}

// exampleJSON is an example as written, with presence of every field visible.
type exampleJSON struct {
	Name     *string         `json:"name"`
	Instance json.RawMessage `json:"instance"`
	Valid    *bool           `json:"valid"`
}

func parseExamples(b []byte) ([]Example, error) {
	var raw []json.RawMessage
	// Decoding bytes in memory is deterministic; workflowcheck flags encoding/json only
	// because its reflection reaches runtime internals.
	//workflowcheck:ignore
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("the examples are not a JSON array: %v", err)
	}
	out := make([]Example, 0, len(raw))
	seen := map[string]int{}
	for i, r := range raw {
		var e exampleJSON
		dec := json.NewDecoder(bytes.NewReader(r))
		// A misspelt "valid" must not silently turn into "must reject".
		dec.DisallowUnknownFields()
		//workflowcheck:ignore
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("example %d is not an object {name, instance, valid}: %v", i, err)
		}
		switch {
		case e.Name == nil || strings.TrimSpace(*e.Name) == "":
			return nil, fmt.Errorf("example %d has no name", i)
		case len(e.Instance) == 0:
			return nil, fmt.Errorf("example %q has no instance", *e.Name)
		case e.Valid == nil:
			return nil, fmt.Errorf("example %q does not say whether it is valid (\"valid\": true or false)", *e.Name)
		}
		if j, dup := seen[*e.Name]; dup {
			return nil, fmt.Errorf("example name %q is used twice (examples %d and %d)", *e.Name, j, i)
		}
		seen[*e.Name] = i
		out = append(out, Example{Name: *e.Name, Instance: slices.Clone(e.Instance), Valid: *e.Valid})
	}
	return out, nil
}

// Check is the deterministic validation of one draft (§17.3: "Deterministic scoring MUST run
// first").
type Check struct {
	// SchemaValid is true when there is no schema, or the draft satisfies it.
	SchemaValid bool
	// ExamplesPassed counts the examples the draft got right.
	ExamplesPassed int
	// ExamplesTotal counts the examples.
	ExamplesTotal int
	// Reasons are the failures, readable and sorted within each check (schema first, then
	// examples in their order), at most MaxReasons of them.
	Reasons []string
	// Deterministic is the mean of the checks that apply, in [0,1]: the schema check (1 or
	// 0) when there is a schema, the share of examples passed when there are examples; 1
	// when neither applies.
	Deterministic float32
}

// IsJSON reports whether a content type is JSON: application/json or any type ending in
// +json (RFC 6839), case-insensitive, parameters ignored.
func IsJSON(contentType string) bool { return schemas.IsJSON(contentType) }

// Validate checks a draft against the configuration (§17.3). The schema check runs when a
// schema is set: a JSON draft (IsJSON content type, parseable) is validated against it; a
// draft that cannot be checked (not JSON) fails it. The examples run when there are examples:
// the draft is compiled as a JSON Schema and each example's instance validated against it;
// an example passes when the outcome is the expected one; a draft that is not JSON or not a
// schema fails them all.
//
// refused says the draft must be rejected without consuming a round (§17.3: "Invalid drafts
// MUST be rejected without consuming a round"): when a JSON draft fails the schema; or
// scoring.require_examples_pass and an example fails; or scoring.require_schema_valid and a
// schema is set but the draft cannot be checked. Without require_schema_valid an uncheckable
// draft is accepted with SchemaValid false, which lowers its deterministic score.
func Validate(cfg Config, scoring *policypb.NegotiationPolicy_Scoring, contentType string, draft []byte) (c Check, refused bool) {
	c.SchemaValid = true
	c.ExamplesTotal = len(cfg.Examples)
	var doc any
	parsed := false
	var parseErr error
	if IsJSON(contentType) {
		doc, parseErr = decodeJSON(draft)
		parsed = parseErr == nil
	}
	var checks []float32
	var schemaReasons, exampleReasons []string

	if len(cfg.Schema) > 0 {
		switch {
		case !parsed:
			c.SchemaValid = false
			schemaReasons = append(schemaReasons, "the schema cannot check the draft: "+notJSON(contentType, parseErr))
			if scoring.GetRequireSchemaValid() {
				refused = true
			}
		default:
			reasons, err := validateAgainst(cfg.Schema, doc)
			if err != nil {
				c.SchemaValid = false
				schemaReasons = append(schemaReasons, "the negotiation schema does not compile: "+compileProblem(err))
				refused = true
			} else if len(reasons) > 0 {
				c.SchemaValid = false
				schemaReasons = append(schemaReasons, reasons...)
				refused = true
			}
		}
		checks = append(checks, boolScore(c.SchemaValid))
	}

	if len(cfg.Examples) > 0 {
		var draftSchema *jsonschema.Schema
		var why string
		if !parsed {
			why = notJSON(contentType, parseErr)
		} else if s, err := compileSchema(doc); err != nil {
			why = "the draft is not a JSON Schema: " + compileProblem(err)
		} else {
			draftSchema = s
		}
		if draftSchema == nil {
			exampleReasons = append(exampleReasons, fmt.Sprintf("none of the %d examples can run: %s", len(cfg.Examples), why))
		} else {
			for _, ex := range cfg.Examples {
				if r := runExample(draftSchema, ex); r != "" {
					exampleReasons = append(exampleReasons, r)
				} else {
					c.ExamplesPassed++
				}
			}
		}
		if c.ExamplesPassed < c.ExamplesTotal && scoring.GetRequireExamplesPass() {
			refused = true
		}
		checks = append(checks, float32(c.ExamplesPassed)/float32(c.ExamplesTotal))
	}

	c.Deterministic = 1
	if len(checks) > 0 {
		var sum float32
		for _, s := range checks {
			sum += s
		}
		c.Deterministic = min(max(sum/float32(len(checks)), 0), 1)
	}
	c.Reasons = capReasons(append(schemaReasons, exampleReasons...))
	return c, refused
}

// runExample runs one example against the compiled draft; "" when it passes, else the reason.
func runExample(draft *jsonschema.Schema, ex Example) string {
	inst, err := decodeJSON(ex.Instance)
	if err != nil {
		// ParseConfig refuses such examples; a Config built by hand may still hold one.
		return fmt.Sprintf("example %q: its instance is not JSON: %v", ex.Name, err)
	}
	reasons, verr := validateWith(draft, inst)
	if verr != nil {
		return fmt.Sprintf("example %q: %v", ex.Name, verr)
	}
	accepted := len(reasons) == 0
	switch {
	case accepted && !ex.Valid:
		return fmt.Sprintf("example %q: accepted, expected rejected", ex.Name)
	case !accepted && ex.Valid:
		return fmt.Sprintf("example %q: rejected, expected accepted (%s)", ex.Name, strings.Join(reasons, "; "))
	}
	return ""
}

func notJSON(contentType string, parseErr error) string {
	if parseErr != nil {
		return fmt.Sprintf("the draft is not parseable JSON: %v", parseErr)
	}
	return fmt.Sprintf("the draft's content type %q is not JSON", contentType)
}

func boolScore(ok bool) float32 {
	if ok {
		return 1
	}
	return 0
}

func capReasons(rs []string) []string {
	if len(rs) <= MaxReasons {
		return rs
	}
	out := slices.Clone(rs[:MaxReasons-1])
	return append(out, fmt.Sprintf("... and %d more", len(rs)-(MaxReasons-1)))
}

// schemaURL is the name under which a schema is compiled; it is never fetched.
const schemaURL = "urn:sw4rm:negotiation:schema"

// compileSchema compiles a decoded JSON Schema without I/O (schemas.Compile).
func compileSchema(doc any) (*jsonschema.Schema, error) {
	return schemas.Compile(schemaURL, "negotiation schemas", doc)
}

// compileProblem renders a compile error deterministically: a schema that breaks its
// metaschema by every failing keyword, sorted; any other error by schemas.NotCompiled.
func compileProblem(err error) string {
	if reasons, ok := schemas.MetaschemaReasons(err); ok {
		return strings.Join(reasons, "; ")
	}
	return schemas.NotCompiled
}

// compileDetail renders a compile error with the compiler's own message when it is not a
// metaschema failure: ParseConfig runs outside workflow code, where naming the exact problem
// is worth more than naming the same one every time.
func compileDetail(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		return compileProblem(err)
	}
	return err.Error()
}

// validateAgainst compiles a schema and validates doc against it: reasons are the failures
// (none: valid), err a schema that does not compile.
func validateAgainst(schema json.RawMessage, doc any) (reasons []string, err error) {
	sdoc, err := decodeJSON(schema)
	if err != nil {
		return nil, err
	}
	s, err := compileSchema(sdoc)
	if err != nil {
		return nil, err
	}
	return validateWith(s, doc)
}

// validateWith validates doc against s; reasons are sorted, one per failing leaf.
func validateWith(s *jsonschema.Schema, doc any) (reasons []string, err error) {
	return schemas.Validate(s, doc)
}

// decodeJSON decodes exactly one JSON value, numbers kept exact (schemas.Decode).
func decodeJSON(b []byte) (any, error) { return schemas.Decode(b) }
