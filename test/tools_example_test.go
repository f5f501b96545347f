package test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/examples/tools/coder"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
)

// mcpServerBin returns the path of an npm MCP server's program installed by `make
// mcp-servers`; the test is skipped when it is missing, or fails under CI=true.
func mcpServerBin(t *testing.T, program string) string {
	t.Helper()
	path, err := mcp.InstalledServer(program)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return path
}

// TestToolsExample: on both stores, the tools example (examples/tools, `make
// example-tools`) does what its README says against a server configured with the example's
// repository and the npm filesystem server rooted in each caller's worktree: the seeded test
// fails through builtin/process.run (TOOL_FAILED, its output streamed), the fix made
// through fs/edit_file makes it pass, both providers refuse /etc/passwd with
// PERMISSION_DENIED, and the worktree's diff is the one fixed file.
func TestToolsExample(t *testing.T) {
	fsBin := mcpServerBin(t, "mcp-server-filesystem")
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			repo := filepath.Join(t.TempDir(), "greet")
			require.NoError(t, coder.Seed(repo))
			cfg := newConfig(t, kind)
			cfg.Repos = coder.RepoID + "=" + repo
			cfg.MCPServers = coder.FSProvider + "[network=DENY_ALL]=stdio:" + fsBin + " {worktree}"
			sys := start(t, cfg)
			// The server imports the filesystem server's tools in the background.
			require.Eventually(t, func() bool {
				rs, err := sys.app.Store().ToolProviders().ListTools(t.Context(), coder.FSProvider)
				return err == nil && len(rs) > 0
			}, 60*time.Second, 100*time.Millisecond, "the filesystem server's tools are imported")

			var out bytes.Buffer
			rep, err := coder.Run(t.Context(), sys.app.GRPCAddr(), coder.Options{Out: &out, Timeout: 3 * time.Minute})
			require.NoError(t, err, "example output:\n%s", out.String())
			t.Logf("example output:\n%s", out.String())
			assert.Equal(t, "TOOL_FAILED", rep.FirstRun, "output:\n%s", out.String())
			assert.Contains(t, rep.TestOutput, `want "Hello, Ada!"`, "the failing test's output was streamed")
			assert.Empty(t, rep.SecondRun, "the fixed test passes; output:\n%s", out.String())
			assert.Contains(t, rep.Fixed, `"Hello, " + name + "!"`)
			assert.Equal(t, map[string]string{coder.FSProvider: "PERMISSION_DENIED", coder.Builtin: "PERMISSION_DENIED"}, rep.Refused)
			assert.Contains(t, rep.Diff, "greet.go")
			assert.Contains(t, rep.Diff, "1 file changed")
		})
	}
}
