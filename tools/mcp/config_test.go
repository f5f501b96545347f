package mcp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseProviders(t *testing.T) {
	ps, err := ParseProviders("")
	require.NoError(t, err)
	assert.Empty(t, ps)

	ps, err = ParseProviders(" fs=stdio:npx -y @modelcontextprotocol/server-filesystem /srv ; web=https://tools.example/mcp;")
	require.NoError(t, err)
	require.Len(t, ps, 2)
	assert.Equal(t, "fs", ps[0].ID)
	assert.Equal(t, []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv"}, ps[0].Server.Command)
	assert.Empty(t, ps[0].Server.URL)
	assert.Equal(t, Provider{ID: "web", Server: Server{URL: "https://tools.example/mcp"}}, ps[1])

	for name, bad := range map[string]string{
		"no target":      "fs",
		"empty target":   "fs=",
		"bad id":         "a b=stdio:x",
		"twice":          "fs=stdio:x;fs=http://y",
		"empty command":  "fs=stdio:  ",
		"unknown scheme": "fs=ftp://x",
		"bare command":   "fs=server-filesystem",
		"missing id":     "=stdio:x",
	} {
		_, err := ParseProviders(bad)
		assert.Error(t, err, name)
	}
}
