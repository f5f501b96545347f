package tool

import (
	"strings"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
)

const objSchema = `{"type":"object","properties":{"path":{"type":"string","minLength":1},"n":{"type":"integer","minimum":0}},"required":["path"],"additionalProperties":false}`

func desc(mod func(*connectorpb.ToolDescriptor)) *connectorpb.ToolDescriptor {
	d := &connectorpb.ToolDescriptor{ToolName: "read_file", InputSchema: objSchema, SideEffects: "read", DefaultTimeoutS: 30, MaxConcurrency: 4}
	if mod != nil {
		mod(d)
	}
	return d
}

func TestValidateDescriptor(t *testing.T) {
	tests := []struct {
		name string
		d    *connectorpb.ToolDescriptor
		want string // "" = valid; else a substring of the error
	}{
		{"valid", desc(nil), ""},
		{"nil", nil, "descriptor is missing"},
		{"dotted and dashed name", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = "fs.read-file_2" }), ""},
		{"empty name", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = "" }), "tool_name is required"},
		{"name with space", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = "read file" }), "contains ' '"},
		{"name with slash", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = "fs/read" }), "contains '/'"},
		{"name starting with dash", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = "-x" }), "must start with a letter or digit"},
		{"name too long", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = strings.Repeat("a", 129) }), "longer than 128"},
		{"name at the limit", desc(func(d *connectorpb.ToolDescriptor) { d.ToolName = strings.Repeat("a", 128) }), ""},
		{"no input schema", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = " " }), "input_schema is required"},
		{"input schema not JSON", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = "{" }), "input_schema is not a usable JSON Schema: it is not JSON"},
		{"input schema a URL", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = "https://example.com/s.json" }), "input_schema is not a usable JSON Schema: it is not JSON"},
		{"input schema boolean", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = "true" }), "not a JSON object"},
		{"input schema breaks metaschema", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = `{"type":"objekt"}` }), "breaks its metaschema: /type"},
		{"input schema remote ref", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = `{"$ref":"https://example.com/x.json"}` }), "does not compile"},
		{"input schema bad regexp", desc(func(d *connectorpb.ToolDescriptor) { d.InputSchema = `{"type":"string","pattern":"("}` }), "input_schema is not a usable"},
		{"output schema valid", desc(func(d *connectorpb.ToolDescriptor) { d.OutputSchema = `{"type":"object"}` }), ""},
		{"output schema bad", desc(func(d *connectorpb.ToolDescriptor) { d.OutputSchema = `{"minimum":"x"}` }), "output_schema is not a usable JSON Schema"},
		{"schema too large", desc(func(d *connectorpb.ToolDescriptor) {
			d.InputSchema = `{"description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`
		}), "larger than"},
		{"side effects empty", desc(func(d *connectorpb.ToolDescriptor) { d.SideEffects = "" }), ""},
		{"side effects none", desc(func(d *connectorpb.ToolDescriptor) { d.SideEffects = "none" }), ""},
		{"side effects write", desc(func(d *connectorpb.ToolDescriptor) { d.SideEffects = "write" }), ""},
		{"side effects external", desc(func(d *connectorpb.ToolDescriptor) { d.SideEffects = "external" }), ""},
		{"side effects unknown", desc(func(d *connectorpb.ToolDescriptor) { d.SideEffects = "filesystem" }), `side_effects "filesystem" is not one of`},
		{"timeout at limit", desc(func(d *connectorpb.ToolDescriptor) { d.DefaultTimeoutS = MaxDefaultTimeoutS }), ""},
		{"timeout too long", desc(func(d *connectorpb.ToolDescriptor) { d.DefaultTimeoutS = MaxDefaultTimeoutS + 1 }), "default_timeout_s 86401"},
		{"concurrency too high", desc(func(d *connectorpb.ToolDescriptor) { d.MaxConcurrency = MaxConcurrency + 1 }), "max_concurrency 1025"},
		{"zero timeout and concurrency", desc(func(d *connectorpb.ToolDescriptor) { d.DefaultTimeoutS, d.MaxConcurrency = 0, 0 }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateDescriptor(tt.d)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q, got nil", tt.want)
			}
			if CodeOf(err) != CodeValidation {
				t.Errorf("code = %s, want VALIDATION_ERROR", CodeOf(err))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestSideEffectsOf(t *testing.T) {
	if got := SideEffectsOf(desc(func(d *connectorpb.ToolDescriptor) { d.SideEffects = "" })); got != SideEffectsExternal {
		t.Errorf("empty side_effects = %q, want external", got)
	}
	if got := SideEffectsOf(desc(nil)); got != SideEffectsRead {
		t.Errorf("side_effects = %q, want read", got)
	}
}

func TestValidateArgs(t *testing.T) {
	d := desc(nil)
	tests := []struct {
		name        string
		contentType string
		args        string
		want        string // "" = valid
	}{
		{"valid", "application/json", `{"path":"a.txt","n":2}`, ""},
		{"empty content type is JSON", "", `{"path":"a.txt"}`, ""},
		{"json with parameters", "application/json; charset=utf-8", `{"path":"a"}`, ""},
		{"+json type", "application/vnd.x+json", `{"path":"a"}`, ""},
		{"missing required", "application/json", `{}`, "(root): missing property 'path'"},
		{"empty args are {}", "application/json", ``, "(root): missing property 'path'"},
		{"wrong type with pointer", "application/json", `{"path":"a","n":"two"}`, "/n: got string, want integer"},
		{"below minimum", "application/json", `{"path":"a","n":-1}`, "/n: minimum"},
		{"extra properties sorted", "application/json", `{"path":"a","z":1,"b":2}`, "additional properties 'b', 'z' not allowed"},
		{"two failures sorted", "application/json", `{"path":"","n":"x"}`, "/n: got string, want integer; /path: minLength"},
		{"not json", "application/json", `{"path":`, "are not JSON"},
		{"trailing data", "application/json", `{"path":"a"} {}`, "trailing data"},
		{"not a json content type", "text/plain", `path=a`, `content_type "text/plain" cannot be checked`},
		{"array instead of object", "application/json", `[1]`, "(root): got array, want object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateArgs(d, tt.contentType, []byte(tt.args))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error containing %q, got nil", tt.want)
			}
			if CodeOf(err) != CodeValidation {
				t.Errorf("code = %s, want VALIDATION_ERROR", CodeOf(err))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestValidateArgsCapsReasons(t *testing.T) {
	d := desc(func(d *connectorpb.ToolDescriptor) {
		d.InputSchema = `{"type":"object","additionalProperties":{"type":"integer"}}`
	})
	var b strings.Builder
	b.WriteString("{")
	for i := range 100 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":"s"`)
	}
	b.WriteString("}")
	err := ValidateArgs(d, "", []byte(b.String()))
	if err == nil {
		t.Fatal("want an error")
	}
	if got := strings.Count(err.Error(), "want integer"); got != MaxReasons-1 {
		t.Errorf("%d reasons listed, want %d", got, MaxReasons-1)
	}
	if !strings.Contains(err.Error(), "... and 69 more") {
		t.Errorf("error does not say how many more: %q", err)
	}
}

func TestValidateArgsIsDeterministic(t *testing.T) {
	d := desc(nil)
	args := []byte(`{"path":"","n":"x","q":1,"r":2,"a":3}`)
	first := ValidateArgs(d, "", args).Error()
	for range 20 {
		if got := ValidateArgs(d, "", args).Error(); got != first {
			t.Fatalf("message changed between runs:\n%s\n%s", first, got)
		}
	}
}

func TestValidateProviderID(t *testing.T) {
	for _, ok := range []string{"fs", "agent-1", "a.b:c@d_e", strings.Repeat("p", 128)} {
		if err := ValidateProviderID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", strings.Repeat("p", 129), "é"} {
		err := ValidateProviderID(bad)
		if err == nil || CodeOf(err) != CodeValidation {
			t.Errorf("%q: want a VALIDATION_ERROR, got %v", bad, err)
		}
	}
}
