package mcp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
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
	assert.Empty(t, ps[0].Network, "no posture declared")
	assert.Equal(t, tool.NetworkFullAccess, ps[0].Posture(), "an undeclared posture is the widest")
	assert.False(t, ps[0].PerWorktree())
	assert.Equal(t, Provider{ID: "web", Server: Server{URL: "https://tools.example/mcp"}}, ps[1])

	for name, bad := range map[string]string{
		"no target":              "fs",
		"empty target":           "fs=",
		"bad id":                 "a b=stdio:x",
		"twice":                  "fs=stdio:x;fs=http://y",
		"twice with options":     "fs=stdio:x;fs[network=DENY_ALL]=http://y",
		"empty command":          "fs=stdio:  ",
		"unknown scheme":         "fs=ftp://x",
		"bare command":           "fs=server-filesystem",
		"missing id":             "=stdio:x",
		"missing id, options":    "[network=DENY_ALL]=stdio:x",
		"options not closed":     "fs[network=DENY_ALL=stdio:x",
		"no = after options":     "fs[network=DENY_ALL]stdio:x",
		"empty options":          "fs[]=stdio:x",
		"option without value":   "fs[network]=stdio:x",
		"unknown option":         "fs[color=red]=stdio:x",
		"unknown network":        "fs[network=SOME]=stdio:x",
		"option twice":           "fs[network=DENY_ALL,network=FULL_ACCESS]=stdio:x",
		"placeholder as program": "fs=stdio:{worktree}/bin/server",
		"placeholder in a URL":   "fs=https://h/{worktree}",
	} {
		_, err := ParseProviders(bad)
		assert.Error(t, err, name)
	}
}

func TestParseProvidersOptionsAndWorktree(t *testing.T) {
	ps, err := ParseProviders("fs[network=deny_all]=stdio:/opt/mcp-server-filesystem {worktree};" +
		"web [ network = EGRESS_UNRESTRICTED ] = https://tools.example/mcp;" +
		"gh=stdio:gh-mcp --root={worktree}/src")
	require.NoError(t, err)
	require.Len(t, ps, 3)

	fs := ps[0]
	assert.Equal(t, "fs", fs.ID)
	assert.Equal(t, tool.NetworkDenyAll, fs.Network, "names are matched case-insensitively")
	assert.Equal(t, tool.NetworkDenyAll, fs.Posture())
	assert.Equal(t, []string{"/opt/mcp-server-filesystem", WorktreePlaceholder}, fs.Server.Command)
	assert.True(t, fs.PerWorktree())
	assert.Equal(t, Options{NeedsWorktree: true}, fs.Options())

	assert.Equal(t, Provider{ID: "web", Server: Server{URL: "https://tools.example/mcp"}, Network: tool.NetworkEgressUnrestricted}, ps[1])
	assert.Equal(t, Options{}, ps[1].Options())

	gh := ps[2]
	assert.True(t, gh.PerWorktree(), "the placeholder inside an argument counts")
	s, err := gh.ServerFor("/w/a/")
	require.NoError(t, err)
	assert.Equal(t, []string{"gh-mcp", "--root=/w/a/src"}, s.Command, "replaced inside the argument, the path cleaned")
	assert.Equal(t, []string{"gh-mcp", "--root={worktree}/src"}, gh.Server.Command, "the provider's own command line is left as it was")
}

func TestServerFor(t *testing.T) {
	fs := Provider{ID: "fs", Server: Server{Command: []string{"srv", WorktreePlaceholder}}}
	s, err := fs.ServerFor("/srv/tree")
	require.NoError(t, err)
	assert.Equal(t, []string{"srv", "/srv/tree"}, s.Command)

	_, err = fs.ServerFor("")
	assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err))
	assert.ErrorContains(t, err, "not bound to a worktree")

	_, err = fs.ServerFor("relative/tree")
	assert.Equal(t, tool.CodeInternal, tool.CodeOf(err))

	// A Provider built by hand is held to the rule ParseProviders applies.
	bad := Provider{ID: "x", Server: Server{Command: []string{"{worktree}/srv", WorktreePlaceholder}}}
	_, err = bad.ServerFor("/srv/tree")
	assert.ErrorContains(t, err, "must not come from a worktree")

	shared := Provider{ID: "s", Server: Server{Command: []string{"srv", "/data"}}}
	s, err = shared.ServerFor("")
	require.NoError(t, err, "a server that is not per worktree needs none")
	assert.Equal(t, shared.Server, s)
}
