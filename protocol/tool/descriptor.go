package tool

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
)

// Descriptor limits (§18.1).
const (
	// MaxToolNameLength bounds tool_name, in bytes: MCP's rule for tool names.
	MaxToolNameLength = 128
	// MaxSchemaBytes bounds each schema: descriptors travel in workflow inputs and listings.
	MaxSchemaBytes = 256 << 10
	// MaxDefaultTimeoutS bounds default_timeout_s: a day. A longer job is not a tool call.
	MaxDefaultTimeoutS = 24 * 60 * 60
	// MaxConcurrency bounds max_concurrency; 0 means no limit of the tool's own.
	MaxConcurrency = 1024
)

// SideEffects is a tool's side-effect class (§18.1: "side-effect classes").
type SideEffects string

// The side-effect classes, from harmless to unconfined.
const (
	// SideEffectsNone: a pure computation; it reads and changes nothing outside its
	// arguments.
	SideEffectsNone SideEffects = "none"
	// SideEffectsRead: it reads state (files, a database) but changes nothing.
	SideEffectsRead SideEffects = "read"
	// SideEffectsWrite: it changes local state — files in the worktree, a local database.
	SideEffectsWrite SideEffects = "write"
	// SideEffectsExternal: it acts on the world outside the deployment (network services,
	// e-mail, payments); it is the class of a descriptor that names none, because nothing
	// is known about it.
	SideEffectsExternal SideEffects = "external"
)

// sideEffects lists the classes in order.
var sideEffects = []SideEffects{SideEffectsNone, SideEffectsRead, SideEffectsWrite, SideEffectsExternal}

// SideEffectsOf returns a valid descriptor's side-effect class; an empty side_effects is
// SideEffectsExternal (deny-by-default posture, §18.4: assume the worst of an unknown tool).
func SideEffectsOf(d *connectorpb.ToolDescriptor) SideEffects {
	if d.GetSideEffects() == "" {
		return SideEffectsExternal
	}
	return SideEffects(d.GetSideEffects())
}

// ValidateDescriptor checks a tool descriptor (§18.1, §22):
//   - tool_name: 1 to MaxToolNameLength bytes of ASCII letters, digits and "_", "-", "."
//     (MCP's rule for tool names), starting with a letter or digit;
//   - input_schema: required, an inline JSON Schema object that compiles (draft 2020-12
//     unless its $schema says otherwise) with no remote $ref — a URL is not fetched;
//   - output_schema: optional; when set, the same rules;
//   - side_effects: empty or one of none, read, write, external;
//   - default_timeout_s at most MaxDefaultTimeoutS (0: the policy default applies);
//   - max_concurrency at most MaxConcurrency (0: no limit of the tool's own).
//
// The error is an *Error with CodeValidation, naming the tool and the field.
func ValidateDescriptor(d *connectorpb.ToolDescriptor) error {
	if d == nil {
		return Errorf(CodeValidation, "the tool descriptor is missing")
	}
	if err := ValidateToolName(d.GetToolName()); err != nil {
		return err
	}
	name := strconv.Quote(d.GetToolName())
	if strings.TrimSpace(d.GetInputSchema()) == "" {
		return Errorf(CodeValidation, "tool %s: input_schema is required (a JSON Schema for its arguments)", name)
	}
	if err := checkSchema(name, "input_schema", d.GetInputSchema()); err != nil {
		return err
	}
	if strings.TrimSpace(d.GetOutputSchema()) != "" {
		if err := checkSchema(name, "output_schema", d.GetOutputSchema()); err != nil {
			return err
		}
	}
	if se := d.GetSideEffects(); se != "" && !slices.Contains(sideEffects, SideEffects(se)) {
		return Errorf(CodeValidation, "tool %s: side_effects %s is not one of none, read, write, external", name, strconv.Quote(se))
	}
	if d.GetDefaultTimeoutS() > MaxDefaultTimeoutS {
		return Errorf(CodeValidation, "tool %s: default_timeout_s %d is more than %d (a day)", name, d.GetDefaultTimeoutS(), MaxDefaultTimeoutS)
	}
	if d.GetMaxConcurrency() > MaxConcurrency {
		return Errorf(CodeValidation, "tool %s: max_concurrency %d is more than %d", name, d.GetMaxConcurrency(), MaxConcurrency)
	}
	return nil
}

// ValidateToolName checks a tool_name: see ValidateDescriptor.
func ValidateToolName(n string) error {
	switch {
	case n == "":
		return Errorf(CodeValidation, "tool_name is required")
	case len(n) > MaxToolNameLength:
		return Errorf(CodeValidation, "tool_name is longer than %d bytes", MaxToolNameLength)
	case !utf8.ValidString(n):
		return Errorf(CodeValidation, "tool_name is not valid UTF-8")
	}
	for i, r := range n {
		if isAlnum(r) || (i > 0 && strings.ContainsRune("_-.", r)) {
			continue
		}
		if i == 0 {
			return Errorf(CodeValidation, "tool_name %s must start with a letter or digit", strconv.Quote(n))
		}
		return Errorf(CodeValidation, "tool_name %s contains %q: only letters, digits and _ - . are allowed", strconv.Quote(n), r)
	}
	return nil
}

func checkSchema(name, field, src string) error {
	if len(src) > MaxSchemaBytes {
		return Errorf(CodeValidation, "tool %s: %s is larger than %d bytes", name, field, MaxSchemaBytes)
	}
	if _, err := compileSchema(src); err != nil {
		return Errorf(CodeValidation, "tool %s: %s is not a usable JSON Schema: %v", name, field, err)
	}
	return nil
}

// MaxReasons bounds the reasons ValidateArgs lists; past it one last reason says how many
// more there were, so a huge bad argument does not bloat an error or a workflow history.
const MaxReasons = 32

// ValidateArgs checks a call's arguments against the tool's input schema (§18.2: "typed
// args"). An empty content type means application/json; any other must be JSON (IsJSON),
// since the schema can only check JSON. Empty args mean {} (a call without arguments). The
// error is a VALIDATION_ERROR whose message lists each failure as "<JSON Pointer>: <reason>",
// sorted. The descriptor is expected to be valid (ValidateDescriptor); a schema that does not
// compile is reported as a VALIDATION_ERROR too, naming the descriptor.
func ValidateArgs(d *connectorpb.ToolDescriptor, contentType string, args []byte) error {
	name := strconv.Quote(d.GetToolName())
	if contentType != "" && !IsJSON(contentType) {
		return Errorf(CodeValidation, "tool %s takes JSON arguments; content_type %s cannot be checked against its input schema", name, strconv.Quote(contentType))
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	doc, err := decodeJSON(args)
	if err != nil {
		return Errorf(CodeValidation, "the arguments to tool %s are not JSON: %v", name, err)
	}
	if strings.TrimSpace(d.GetInputSchema()) == "" {
		return Errorf(CodeValidation, "tool %s has no input_schema to check its arguments against", name)
	}
	s, cerr := compileSchema(d.GetInputSchema())
	if cerr != nil {
		return Errorf(CodeValidation, "tool %s: input_schema is not a usable JSON Schema: %v", name, cerr)
	}
	reasons := validateWith(s, doc)
	if len(reasons) == 0 {
		return nil
	}
	if len(reasons) > MaxReasons {
		more := len(reasons) - (MaxReasons - 1)
		reasons = append(reasons[:MaxReasons-1], "... and "+strconv.Itoa(more)+" more")
	}
	return Errorf(CodeValidation, "the arguments to tool %s do not satisfy its input schema: %s", name, strings.Join(reasons, "; "))
}
