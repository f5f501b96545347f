package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersionText(t *testing.T) {
	info := &debug.BuildInfo{
		Main:     debug.Module{Path: "github.com/sw4rm/sw4rm-temporal", Version: "v0.9.0"},
		Deps:     []*debug.Module{{Path: "go.temporal.io/sdk", Version: "v1.50.0"}},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}},
	}
	out := versionText(info, true)
	assert.Contains(t, out, "sw4rm v0.9.0\n")
	assert.Contains(t, out, "commit: abc123 (modified)\n")
	assert.Contains(t, out, "temporal go sdk: v1.50.0\n")
	assert.Contains(t, versionText(nil, false), "sw4rm unknown\n")
}

// TestVersionFlag: `sw4rm --version` prints the version lines and exits without starting
// anything.
func TestVersionFlag(t *testing.T) {
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	require.NoError(t, root.Execute())
	assert.True(t, strings.HasPrefix(out.String(), "sw4rm "), out.String())
	assert.Contains(t, out.String(), "temporal go sdk: ")
}
