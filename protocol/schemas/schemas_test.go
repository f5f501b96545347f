package schemas

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeKeepsNumbersAndRefusesTrailingData(t *testing.T) {
	v, err := Decode([]byte(`{"n": 12345678901234567890}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := v.(map[string]any)["n"]; n != json.Number("12345678901234567890") {
		t.Errorf("n = %#v, want the exact json.Number", n)
	}
	if _, err := Decode([]byte(`{} {}`)); err == nil || !strings.Contains(err.Error(), "trailing data") {
		t.Errorf("trailing data: err = %v", err)
	}
}

func TestPointer(t *testing.T) {
	if got := Pointer([]string{"a/b", "c~d", "0"}); got != "/a~1b/c~0d/0" {
		t.Errorf("Pointer = %q", got)
	}
	if got := PointerOrRoot(nil); got != "(root)" {
		t.Errorf("PointerOrRoot(nil) = %q", got)
	}
}

func TestCompileIsOfflineAndReasonsAreSorted(t *testing.T) {
	remote, _ := Decode([]byte(`{"$ref": "https://example.com/s.json"}`))
	if _, err := Compile("urn:test", "test schemas", remote); err == nil {
		t.Fatal("a remote $ref compiled: it must not be fetched")
	}
	doc, _ := Decode([]byte(`{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}},"additionalProperties":false}`))
	s, err := Compile("urn:test", "test schemas", doc)
	if err != nil {
		t.Fatal(err)
	}
	inst, _ := Decode([]byte(`{"b": 1, "a": "x", "z": true, "y": true}`))
	reasons, err := Validate(s, inst)
	if err != nil {
		t.Fatal(err)
	}
	if len(reasons) != 3 || !strings.HasPrefix(reasons[0], "(root): ") || !strings.Contains(reasons[0], "'y', 'z'") ||
		!strings.HasPrefix(reasons[1], "/a: ") || !strings.HasPrefix(reasons[2], "/b: ") {
		t.Errorf("reasons = %q, want the root's sorted extra properties, then /a and /b", reasons)
	}
	if !IsJSON("application/problem+json; charset=utf-8") || IsJSON("text/plain") {
		t.Error("IsJSON")
	}
}
