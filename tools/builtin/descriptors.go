package builtin

import (
	"github.com/sw4rm/sw4rm-temporal/proto/connectorpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// Encodings of file content in fs.read's result and fs.write's arguments: JSON strings
// carry text, so a file that is not UTF-8 travels as base64 rather than being mangled.
const (
	// EncodingUTF8: the content is the file's text.
	EncodingUTF8 = "utf-8"
	// EncodingBase64: the content is the file's bytes in standard base64.
	EncodingBase64 = "base64"
)

// descriptors are the built-in tools' descriptors (§18.1). Each says honestly whether a
// retry is safe (idempotent, §18.3) and what it touches (side_effects). It is long because it
// is a table: one literal per tool, read side by side.
func descriptors() []*connectorpb.ToolDescriptor {
	return []*connectorpb.ToolDescriptor{
		{
			ToolName: ToolFSRead,
			InputSchema: `{
  "type": "object",
  "description": "Read a file of the caller's worktree.",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "Path relative to the worktree."}
  },
  "required": ["path"],
  "additionalProperties": false
}`,
			OutputSchema: `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "content": {"type": "string", "description": "The file's text, or its bytes in base64 when it is not UTF-8 (see encoding)."},
    "encoding": {"enum": ["utf-8", "base64"]},
    "size": {"type": "integer", "minimum": 0, "description": "The file's size in bytes."}
  },
  "required": ["path", "content", "encoding", "size"],
  "additionalProperties": false
}`,
			Idempotent:      true,
			NeedsWorktree:   true,
			DefaultTimeoutS: 30,
			SideEffects:     string(tool.SideEffectsRead),
		},
		{
			ToolName: ToolFSWrite,
			InputSchema: `{
  "type": "object",
  "description": "Write a file of the caller's worktree, replacing what it held.",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "Path relative to the worktree."},
    "content": {"type": "string", "description": "The new content: text, or base64 when encoding says so."},
    "encoding": {"enum": ["utf-8", "base64"], "default": "utf-8"},
    "create_dirs": {"type": "boolean", "default": false, "description": "Create missing parent directories."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`,
			OutputSchema: `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "size": {"type": "integer", "minimum": 0, "description": "Bytes written."}
  },
  "required": ["path", "size"],
  "additionalProperties": false
}`,
			// Writing the same bytes again leaves the same file: a retry is safe.
			Idempotent:      true,
			NeedsWorktree:   true,
			DefaultTimeoutS: 30,
			SideEffects:     string(tool.SideEffectsWrite),
		},
		{
			ToolName: ToolFSList,
			InputSchema: `{
  "type": "object",
  "description": "List a directory of the caller's worktree, sorted by name.",
  "properties": {
    "path": {"type": "string", "minLength": 1, "default": ".", "description": "Path relative to the worktree."}
  },
  "additionalProperties": false
}`,
			OutputSchema: `{
  "type": "object",
  "properties": {
    "entries": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "type": {"enum": ["file", "dir", "symlink", "other"]},
          "size": {"type": "integer", "minimum": 0}
        },
        "required": ["name", "type", "size"],
        "additionalProperties": false
      }
    },
    "truncated": {"type": "boolean", "description": "More entries exist than were listed."}
  },
  "required": ["entries"],
  "additionalProperties": false
}`,
			Idempotent:      true,
			NeedsWorktree:   true,
			DefaultTimeoutS: 30,
			SideEffects:     string(tool.SideEffectsRead),
		},
		{
			ToolName: ToolProcessRun,
			InputSchema: `{
  "type": "object",
  "description": "Run a program in the caller's worktree; its output streams as frames. Needs privilege_level DEFAULT or higher.",
  "properties": {
    "argv": {"type": "array", "minItems": 1, "maxItems": 4096, "items": {"type": "string"}, "description": "The program and its arguments; the program is looked up on PATH unless it contains a slash."},
    "stdin": {"type": "string", "description": "Standard input; none when absent."}
  },
  "required": ["argv"],
  "additionalProperties": false
}`,
			OutputSchema: `{
  "type": "object",
  "properties": {
    "exit_code": {"type": "integer"},
    "stdout_bytes": {"type": "integer", "minimum": 0},
    "stderr_bytes": {"type": "integer", "minimum": 0},
    "cpu_ms": {"type": "integer", "minimum": 0, "description": "CPU time of the process and its children."}
  },
  "required": ["exit_code", "stdout_bytes", "stderr_bytes", "cpu_ms"],
  "additionalProperties": false
}`,
			// A program may do anything to the worktree; running it twice is not known to be
			// harmless, so it is never retried (§18.3).
			Idempotent:      false,
			NeedsWorktree:   true,
			DefaultTimeoutS: 300,
			SideEffects:     string(tool.SideEffectsWrite),
		},
		{
			ToolName:        ToolEcho,
			InputSchema:     `{"type": "object", "description": "Any JSON object; the result is the same object."}`,
			OutputSchema:    `{"type": "object"}`,
			Idempotent:      true,
			DefaultTimeoutS: 10,
			SideEffects:     string(tool.SideEffectsNone),
		},
		{
			ToolName: ToolSleep,
			InputSchema: `{
  "type": "object",
  "description": "Wait, emitting {\"elapsed_ms\": n} every tick.",
  "properties": {
    "ms": {"type": "integer", "minimum": 0, "maximum": 86400000},
    "tick_ms": {"type": "integer", "minimum": 10, "maximum": 86400000, "default": 100}
  },
  "required": ["ms"],
  "additionalProperties": false
}`,
			OutputSchema: `{
  "type": "object",
  "properties": {
    "slept_ms": {"type": "integer", "minimum": 0}
  },
  "required": ["slept_ms"],
  "additionalProperties": false
}`,
			Idempotent:  true,
			SideEffects: string(tool.SideEffectsNone),
		},
	}
}
