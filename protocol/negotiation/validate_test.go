package negotiation

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
)

// priceSchema is the negotiation schema of most cases: an offer with a non-negative price.
const priceSchema = `{
  "type": "object",
  "required": ["price", "currency"],
  "properties": {
    "price": {"type": "number", "minimum": 0},
    "currency": {"enum": ["EUR", "USD"]},
    "a/b~c": {"type": "string"}
  },
  "additionalProperties": false
}`

// contractExamples run against a draft that is itself a JSON Schema (the contract).
const contractExamples = `[
  {"name": "pos", "instance": {"qty": 2}, "valid": true},
  {"name": "neg", "instance": {"qty": -1}, "valid": false},
  {"name": "null instance", "instance": null, "valid": false}
]`

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, Config{}, cfg)

	cfg, err = ParseConfig([]byte(" "+priceSchema+"\n"), []byte(contractExamples))
	require.NoError(t, err)
	assert.JSONEq(t, priceSchema, string(cfg.Schema))
	require.Len(t, cfg.Examples, 3)
	assert.Equal(t, "pos", cfg.Examples[0].Name)
	assert.JSONEq(t, `{"qty": 2}`, string(cfg.Examples[0].Instance))
	assert.True(t, cfg.Examples[0].Valid)
	assert.False(t, cfg.Examples[1].Valid)
	assert.Equal(t, "null", string(cfg.Examples[2].Instance), "null is an instance, not a missing one")

	// A local $ref compiles; the config round-trips through JSON (it travels in workflow inputs).
	cfg, err = ParseConfig([]byte(`{"$defs": {"p": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/p"}}}`), nil)
	require.NoError(t, err)
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	var back Config
	require.NoError(t, json.Unmarshal(b, &back))
	assert.JSONEq(t, string(cfg.Schema), string(back.Schema))
}

func TestParseConfigRefusals(t *testing.T) {
	cases := []struct {
		name             string
		schema, examples string
		want             []string
	}{
		{"schema not JSON", `{"type": `, "", []string{"the schema is not JSON"}},
		{"schema trailing data", `{} {}`, "", []string{"the schema is not JSON: trailing data"}},
		{"schema breaks the metaschema", `{"type": 5, "properties": {"p/q": {"minimum": "x"}}}`, "",
			[]string{"the schema does not compile", "/properties/p~1q/minimum: got string, want number", "/type: "}},
		{"remote ref", `{"$ref": "https://example.com/s.json"}`, "", []string{`remote reference "https://example.com/s.json" is not loaded`}},
		{"remote metaschema", `{"$schema": "https://example.com/meta"}`, "", []string{"is not loaded"}},
		{"bad regex", `{"pattern": "("}`, "", []string{"the schema does not compile: /pattern: '(' is not valid regex"}},
		{"unresolvable ref", `{"$ref": "#/$defs/nope"}`, "", []string{"the schema does not compile: "}},
		{"examples not an array", "", `{"name": "x"}`, []string{"the examples are not a JSON array"}},
		{"example not an object", "", `[1]`, []string{"example 0 is not an object {name, instance, valid}"}},
		{"example without name", "", `[{"instance": 1, "valid": true}]`, []string{"example 0 has no name"}},
		{"example with blank name", "", `[{"name": " ", "instance": 1, "valid": true}]`, []string{"example 0 has no name"}},
		{"example without instance", "", `[{"name": "a", "valid": true}]`, []string{`example "a" has no instance`}},
		{"example without valid", "", `[{"name": "a", "instance": 1}]`, []string{`example "a" does not say whether it is valid`}},
		{"example with a misspelt field", "", `[{"name": "a", "instance": 1, "valid": true, "vaild": false}]`, []string{`unknown field "vaild"`}},
		{"duplicate example names", "", `[{"name": "a", "instance": 1, "valid": true}, {"name": "a", "instance": 2, "valid": false}]`,
			[]string{`example name "a" is used twice (examples 0 and 1)`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.schema), []byte(c.examples))
			require.ErrorIs(t, err, ErrInvalidConfig)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func mustConfig(t *testing.T, schema, examples string) Config {
	t.Helper()
	cfg, err := ParseConfig([]byte(schema), []byte(examples))
	require.NoError(t, err)
	return cfg
}

func TestValidateSchema(t *testing.T) {
	cfg := mustConfig(t, priceSchema, "")
	strict := &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: true}
	cases := []struct {
		name        string
		scoring     *policypb.NegotiationPolicy_Scoring
		ct, draft   string
		valid       bool
		refused     bool
		reasons     []string
		determinism float32
	}{
		{name: "valid", ct: "application/json", draft: `{"price": 3.5, "currency": "EUR"}`, valid: true, determinism: 1},
		{name: "valid, +json type with parameters", ct: "Application/Offer+JSON; charset=utf-8", draft: `{"price": 0, "currency": "USD"}`, valid: true, determinism: 1},
		{name: "invalid: every failure, sorted, escaped pointers", ct: "application/json",
			draft:   `{"price": -1, "a/b~c": 7, "zz": 1, "aa": 2}`,
			refused: true,
			reasons: []string{
				"(root): additional properties 'aa', 'zz' not allowed",
				"(root): missing property 'currency'",
				"/a~1b~0c: got number, want string",
				"/price: minimum: got -1, want 0",
			}},
		{name: "invalid refuses even without require_schema_valid", scoring: &policypb.NegotiationPolicy_Scoring{}, ct: "application/json",
			draft: `{"price": "3", "currency": "EUR"}`, refused: true, reasons: []string{"/price: got string, want number"}},
		{name: "not JSON content, required", scoring: strict, ct: "text/plain", draft: `{"price": 1, "currency": "EUR"}`, refused: true,
			reasons: []string{`the schema cannot check the draft: the draft's content type "text/plain" is not JSON`}},
		{name: "not JSON content, not required: scored 0, not refused", ct: "text/plain", draft: "three euros",
			reasons: []string{`the schema cannot check the draft: the draft's content type "text/plain" is not JSON`}},
		{name: "unparseable JSON, required", scoring: strict, ct: "application/json", draft: `{"price": `, refused: true,
			reasons: []string{"the schema cannot check the draft: the draft is not parseable JSON: unexpected EOF"}},
		{name: "unparseable JSON, not required", ct: "application/json", draft: `{"price": 1} x`,
			reasons: []string{"the schema cannot check the draft: the draft is not parseable JSON: trailing data after the JSON value"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check, refused := Validate(cfg, c.scoring, c.ct, []byte(c.draft))
			assert.Equal(t, c.valid, check.SchemaValid)
			assert.Equal(t, c.refused, refused)
			assert.Equal(t, c.reasons, check.Reasons)
			assert.Equal(t, c.determinism, check.Deterministic)
			assert.Zero(t, check.ExamplesTotal)
		})
	}
}

func TestValidateNothingConfigured(t *testing.T) {
	check, refused := Validate(Config{}, &policypb.NegotiationPolicy_Scoring{RequireSchemaValid: true, RequireExamplesPass: true}, "text/plain", []byte("anything"))
	assert.False(t, refused)
	assert.Equal(t, Check{SchemaValid: true, Deterministic: 1}, check)
}

// contractDraft is a draft that passes contractExamples: a schema for {"qty": >= 0}.
const contractDraft = `{"type": "object", "properties": {"qty": {"type": "integer", "minimum": 0}}, "required": ["qty"]}`

func TestValidateExamples(t *testing.T) {
	cfg := mustConfig(t, "", contractExamples)
	must := &policypb.NegotiationPolicy_Scoring{RequireExamplesPass: true}
	cases := []struct {
		name      string
		scoring   *policypb.NegotiationPolicy_Scoring
		ct, draft string
		passed    int
		refused   bool
		reasons   []string
		score     float32
	}{
		{name: "all pass", scoring: must, ct: "application/json", draft: contractDraft, passed: 3, score: 1},
		{name: "accepts what it must reject", scoring: must, ct: "application/json",
			draft: `{"type": ["object", "null"], "properties": {"qty": {"type": "integer"}}}`, passed: 1, refused: true,
			reasons: []string{`example "neg": accepted, expected rejected`, `example "null instance": accepted, expected rejected`}, score: 1.0 / 3},
		{name: "rejects what it must accept, with the draft's reason", ct: "application/json",
			draft: `{"type": "object", "properties": {"qty": {"type": "integer", "minimum": 5}}, "required": ["qty"]}`, passed: 2,
			reasons: []string{`example "pos": rejected, expected accepted (/qty: minimum: got 2, want 5)`}, score: 2.0 / 3},
		{name: "not a schema", scoring: must, ct: "application/json", draft: `{"type": 5}`, refused: true,
			reasons: []string{"none of the 3 examples can run: the draft is not a JSON Schema: /type: got number, want array; /type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'"}},
		{name: "a schema that does not compile: one fixed sentence", ct: "application/json", draft: `{"properties": {"a": {"$ref": "#/$defs/nope"}, "b": {"$ref": "https://x.example/s"}}}`,
			reasons: []string{"none of the 3 examples can run: the draft is not a JSON Schema: it does not compile (an unresolvable or remote $ref, an invalid regular expression, or a duplicate $id or anchor)"}},
		{name: "not JSON", scoring: must, ct: "text/markdown", draft: "# qty", refused: true,
			reasons: []string{`none of the 3 examples can run: the draft's content type "text/markdown" is not JSON`}},
		{name: "failures not refused without require_examples_pass", ct: "application/json", draft: `true`, passed: 1,
			reasons: []string{`example "neg": accepted, expected rejected`, `example "null instance": accepted, expected rejected`}, score: 1.0 / 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			check, refused := Validate(cfg, c.scoring, c.ct, []byte(c.draft))
			assert.True(t, check.SchemaValid, "no schema")
			assert.Equal(t, 3, check.ExamplesTotal)
			assert.Equal(t, c.passed, check.ExamplesPassed)
			assert.Equal(t, c.refused, refused)
			assert.Equal(t, c.reasons, check.Reasons)
			assert.InDelta(t, c.score, check.Deterministic, 1e-6)
		})
	}
}

// TestValidateSchemaAndExamples: the deterministic score is the mean of both checks.
func TestValidateSchemaAndExamples(t *testing.T) {
	// The negotiation schema requires the draft to be a schema of type object.
	cfg := mustConfig(t, `{"type": "object", "required": ["type"], "properties": {"type": {"const": "object"}}}`,
		`[{"name": "pos", "instance": {"qty": 2}, "valid": true}, {"name": "neg", "instance": {"qty": -1}, "valid": false}]`)
	check, refused := Validate(cfg, nil, "application/json", []byte(`{"type": "object"}`))
	assert.False(t, refused)
	assert.True(t, check.SchemaValid)
	assert.Equal(t, 1, check.ExamplesPassed)
	assert.InDelta(t, 0.75, check.Deterministic, 1e-6)
	assert.Equal(t, []string{`example "neg": accepted, expected rejected`}, check.Reasons)

	check, refused = Validate(cfg, nil, "application/json", []byte(`{"type": "array"}`))
	assert.True(t, refused)
	assert.False(t, check.SchemaValid)
	assert.Equal(t, []string{"/type: value must be 'object'", `example "pos": rejected, expected accepted ((root): got object, want array)`}, check.Reasons)
	assert.InDelta(t, 0.25, check.Deterministic, 1e-6)
}

func TestValidateCapsReasons(t *testing.T) {
	cfg := mustConfig(t, `{"type": "array", "items": {"type": "string"}}`, "")
	items := make([]string, 100)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	check, refused := Validate(cfg, nil, "application/json", []byte("["+strings.Join(items, ",")+"]"))
	assert.True(t, refused)
	require.Len(t, check.Reasons, MaxReasons)
	assert.Equal(t, "/0: got number, want string", check.Reasons[0])
	assert.Equal(t, "... and 37 more", check.Reasons[MaxReasons-1])
}

// TestValidateDeterministic: the library walks the draft's maps; the reasons must not show it.
func TestValidateDeterministic(t *testing.T) {
	cfg := mustConfig(t, `{"type": "object", "additionalProperties": false, "properties": {"k": {"type": "object", "additionalProperties": {"type": "integer"}}}}`, "")
	var members []string
	for i := range 20 {
		members = append(members, fmt.Sprintf(`"m%02d": %d`, i, i))
	}
	draft := []byte(`{` + strings.Join(members, ",") + `, "k": {"x": "1", "y": "2", "z": "3"}}`)
	first, _ := Validate(cfg, nil, "application/json", draft)
	require.Len(t, first.Reasons, 4)
	assert.True(t, strings.HasPrefix(first.Reasons[0], "(root): additional properties 'm00', 'm01', 'm02',"), first.Reasons[0])
	for range 50 {
		again, _ := Validate(cfg, nil, "application/json", draft)
		require.Equal(t, first, again)
	}
}

func TestIsJSON(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"APPLICATION/JSON":                  true,
		" application/json ; charset=utf-8": true,
		"application/problem+json":          true,
		"application/vnd.sw4rm.offer+json":  true,
		"text/plain":                        false,
		"application/jsonl":                 false,
		"+json":                             false,
		"":                                  false,
		"application/x-ndjson":              false,
	} {
		assert.Equal(t, want, IsJSON(ct), "%q", ct)
	}
}
