package tool

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateCallID(t *testing.T) {
	tests := []struct {
		id   string
		want string // "" = valid
	}{
		{"tool-9f5c", ""},
		{"6ae58b74-4e19-4b2f-9e7a-1a1a1fd2d001", ""},
		{"a:b.c_d", ""},
		{strings.Repeat("x", MaxCallIDLength), ""},
		{"", "call_id is required"},
		{strings.Repeat("x", MaxCallIDLength+1), "longer than 128"},
		{"-abc", "must start with a letter or digit"},
		{".abc", "must start with a letter or digit"},
		{"a/b", "contains '/'"},
		{"a b", "contains ' '"},
		{"caf\u00e9", "contains 'é'"},
		{"a\xffb", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			err := ValidateCallID(tt.id)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || CodeOf(err) != CodeValidation {
				t.Fatalf("got %v, want VALIDATION_ERROR containing %q", err, tt.want)
			}
		})
	}
}

func TestAssignCallID(t *testing.T) {
	tests := []struct {
		name, given, fresh string
		want               string
		code               Code
	}{
		{"given kept", "mine-1", "uuid", "mine-1", ""},
		{"absent assigned", "", "6ae58b74-4e19", "tool-6ae58b74-4e19", ""},
		{"bad given refused", "a/b", "uuid", "", CodeValidation},
		{"no fresh token", "", "", "", CodeInternal},
		{"bad fresh token", "", "a b", "", CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AssignCallID(tt.given, tt.fresh)
			if CodeOf(err) != tt.code {
				t.Fatalf("code = %q (err %v), want %q", CodeOf(err), err, tt.code)
			}
			if got != tt.want {
				t.Errorf("call_id = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWorkflowID(t *testing.T) {
	if got := WorkflowID("tool-1"); got != "tool/tool-1" {
		t.Errorf("WorkflowID = %q", got)
	}
}

func TestCodes(t *testing.T) {
	want := []string{"TOOL_TIMEOUT", "VALIDATION_ERROR", "PERMISSION_DENIED", "WORKTREE_NOT_BOUND", "WALL_TIMEOUT",
		"CPU_BUDGET_EXCEEDED", "CANCELLED", "NOT_FOUND", "ALREADY_COMPLETED", "TOOL_FAILED",
		"INTERRUPTED", "INTERNAL_ERROR"}
	got := Codes()
	if len(got) != len(want) {
		t.Fatalf("Codes() = %v", got)
	}
	for i, c := range got {
		if string(c) != want[i] || !c.Valid() {
			t.Errorf("Codes()[%d] = %q, want %q", i, c, want[i])
		}
	}
	if Code("NOPE").Valid() {
		t.Error("an unknown code is valid")
	}
	transient := map[Code]bool{CodeToolTimeout: true, CodeInterrupted: true, CodeInternal: true}
	for _, c := range got {
		if c.Transient() != transient[c] {
			t.Errorf("%s.Transient() = %v", c, c.Transient())
		}
	}
}

func TestErrorProtoAndCodeOf(t *testing.T) {
	e := Errorf(CodeCancelled, "cancelled by %s", "op")
	pe := e.Proto("c1")
	if pe.GetCallId() != "c1" || pe.GetErrorCode() != "CANCELLED" || pe.GetMessage() != "cancelled by op" {
		t.Errorf("Proto = %v", pe)
	}
	if e.Error() != "CANCELLED: cancelled by op" {
		t.Errorf("Error() = %q", e.Error())
	}
	if CodeOf(nil) != "" || CodeOf(errors.New("x")) != CodeInternal {
		t.Error("CodeOf of nil or a plain error")
	}
	if CodeOf(errors.Join(errors.New("ctx"), e)) != CodeCancelled {
		t.Error("CodeOf does not unwrap")
	}
}
