package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestBareIDs: every id kind takes the workflow ID the Temporal UI shows and the bare id
// alike, and strips only its own kind's prefix.
func TestBareIDs(t *testing.T) {
	for _, tc := range []struct {
		kind     idKind
		arg, out string
	}{
		{agentIDs, "agent/coder-1", "coder-1"},
		{agentIDs, "worktree/coder-1", "coder-1"},
		{agentIDs, "coder-1", "coder-1"},
		{agentIDs, " agent/coder-1\n", "coder-1"},
		{agentIDs, "dag/coder-1", "dag/coder-1"},
		{dagIDs, "dag/release", "release"},
		{dagIDs, "release", "release"},
		{dagIDs, "dag/dag/x", "dag/x"},
		{hitlIDs, "hitl/inv-7", "inv-7"},
		{hitlIDs, "inv-7", "inv-7"},
		{taskIDs, "task/t-1", "t-1"},
		{toolCallIDs, "tool/tool-9f5c", "tool-9f5c"},
		{toolCallIDs, "", ""},
	} {
		assert.Equal(t, tc.out, tc.kind.bare(tc.arg), "%v %q", tc.kind, tc.arg)
	}
}
