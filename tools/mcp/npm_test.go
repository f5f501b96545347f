package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// These tests run the executor against real MCP servers from npm —
// @modelcontextprotocol/server-everything and server-filesystem — which `make mcp-servers`
// installs at the versions tools/mcp/npm pins, into SW4RM_MCP_SERVERS_DIR (the Makefile
// sets it) or else ~/.cache/sw4rm/mcp.

// stopQuickly bounds how long closing a session waits for a server that is still busy with
// a cancelled call before it is sent SIGTERM, so that the tests end promptly.
const stopQuickly = 500 * time.Millisecond

// npmServer returns the path of an installed npm MCP server's program. When it or Node.js
// is missing the test is skipped — or fails under CI=true, where `make test` installs them.
func npmServer(t *testing.T, program string) string {
	t.Helper()
	path, err := InstalledServer(program)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return path
}

// countDials makes e count the servers it starts.
func countDials(e *Executor) func() int {
	var mu sync.Mutex
	n := 0
	e.connect = func(ctx context.Context, s Server) (*Client, error) {
		mu.Lock()
		n++
		mu.Unlock()
		return Connect(ctx, s)
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestEverythingServer(t *testing.T) {
	p := Provider{ID: "everything", Server: Server{Command: []string{npmServer(t, "mcp-server-everything"), "stdio"}, StopTimeout: stopQuickly}}
	ctx := t.Context()

	t.Run("import", func(t *testing.T) {
		imp, err := ImportProvider(ctx, p)
		require.NoError(t, err)
		assert.Empty(t, imp.Skipped, "every tool of the reference server is a valid descriptor")
		byName := map[string]bool{}
		for _, d := range imp.Tools {
			byName[d.GetToolName()] = true
			require.NoError(t, tool.ValidateDescriptor(d))
			assert.False(t, d.GetNeedsWorktree(), "a server that is not per worktree")
			if d.GetToolName() == "echo" {
				assert.Equal(t, string(tool.SideEffectsRead), d.GetSideEffects(), "echo is annotated read-only")
				assert.True(t, d.GetIdempotent())
				assert.Contains(t, d.GetInputSchema(), `"message"`)
			}
		}
		assert.True(t, byName["echo"] && byName["trigger-long-running-operation"], "imported %v", byName)
	})

	e := NewExecutor(p)
	t.Cleanup(func() { _ = e.Close() })
	dials := countDials(e)
	echo := func(t *testing.T, msg string) {
		t.Helper()
		r, err := e.Call(ctx, request("echo", fmt.Sprintf(`{"message":%q}`, msg), open, ""), noFrames)
		require.NoError(t, err)
		assert.Equal(t, "application/json", r.ContentType)
		assert.JSONEq(t, fmt.Sprintf(`[{"type":"text","text":"Echo: %s"}]`, msg), string(r.Data))
	}

	t.Run("echo", func(t *testing.T) {
		echo(t, "hello")
	})

	t.Run("progress frames", func(t *testing.T) {
		var fr frames
		r, err := e.Call(ctx, request("trigger-long-running-operation", `{"duration":0.3,"steps":3}`, open, ""), fr.emit)
		require.NoError(t, err)
		assert.Contains(t, string(r.Data), "Long running operation completed")
		got := fr.all()
		require.Len(t, got, 3, "a frame per step, all before the result: %v", got)
		for i, d := range got {
			assert.JSONEq(t, fmt.Sprintf(`{"progress":%d,"total":3}`, i+1), d)
		}
	})

	t.Run("cancel mid-stream", func(t *testing.T) {
		// An hour-long operation, a step a second: the call can only end before the test
		// times out by not waiting for the server, which ignores the cancellation and keeps
		// counting.
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		first := make(chan string, 1)
		emit := func(_ context.Context, _ string, data []byte) error {
			select {
			case first <- string(data):
			default:
			}
			return nil
		}
		done := make(chan error, 1)
		go func() {
			_, err := e.Call(cctx, request("trigger-long-running-operation", `{"duration":3600,"steps":3600}`, open, ""), emit)
			done <- err
		}()
		var err error
		select {
		case f := <-first:
			assert.JSONEq(t, `{"progress":1,"total":3600}`, f)
			cancel()
			err = <-done
		case err = <-done:
			t.Fatalf("the call ended before its first frame: %v", err)
		}
		assert.Equal(t, tool.CodeCancelled, tool.CodeOf(err), "err %v", err)

		echo(t, "still there") // the session outlives a cancelled call
	})

	t.Run("deadline", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := e.Call(dctx, request("trigger-long-running-operation", `{"duration":3600,"steps":1}`, open, ""), noFrames)
		assert.Equal(t, tool.CodeToolTimeout, tool.CodeOf(err), "err %v", err)
	})

	assert.Equal(t, 1, dials(), "every call shared one server process")
}

func TestFilesystemServer(t *testing.T) {
	ps, err := ParseProviders("fs[network=DENY_ALL]=stdio:" + npmServer(t, "mcp-server-filesystem") + " " + WorktreePlaceholder)
	require.NoError(t, err)
	p := ps[0]
	p.Server.StopTimeout = stopQuickly
	ctx := t.Context()
	deny := tool.Policy{Network: tool.NetworkDenyAll}

	t.Run("import", func(t *testing.T) {
		imp, err := ImportProvider(ctx, p)
		require.NoError(t, err)
		names := map[string]bool{}
		for _, d := range imp.Tools {
			names[d.GetToolName()] = true
			assert.True(t, d.GetNeedsWorktree(), "%s: a per-worktree server's tools need a worktree", d.GetToolName())
		}
		assert.True(t, names["read_text_file"] && names["write_file"] && names["list_allowed_directories"], "imported %v", names)
	})

	// The worktree sits beside a secret the server must not reach.
	parent := t.TempDir()
	wt := filepath.Join(parent, "wt")
	require.NoError(t, os.Mkdir(wt, 0o755))
	secret := filepath.Join(parent, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("s3cret"), 0o600))
	require.NoError(t, os.Symlink(secret, filepath.Join(wt, "link.txt")))

	e := NewExecutor(p)
	t.Cleanup(func() { _ = e.Close() })
	dials := countDials(e)
	fsCall := func(worktree, toolName string, args any) (string, error) {
		b, err := json.Marshal(args)
		require.NoError(t, err)
		r, err := e.Call(ctx, request(toolName, string(b), deny, worktree), noFrames)
		return string(r.Data), err
	}

	t.Run("writes and reads inside its worktree", func(t *testing.T) {
		_, err := fsCall(wt, "write_file", map[string]string{"path": filepath.Join(wt, "a.txt"), "content": "hello"})
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(wt, "a.txt"))
		require.NoError(t, err)
		assert.Equal(t, "hello", string(b))

		got, err := fsCall(wt, "read_text_file", map[string]string{"path": "a.txt"})
		require.NoError(t, err)
		assert.JSONEq(t, `{"content":"hello"}`, got, "a relative path is the worktree's")
	})

	t.Run("refuses what lies outside", func(t *testing.T) {
		for _, path := range []string{"/etc/hostname", "../secret.txt", secret, "link.txt"} {
			got, err := fsCall(wt, "read_text_file", map[string]string{"path": path})
			assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err), "%s: %v", path, err)
			assert.ErrorContains(t, err, "Access denied", path)
			assert.NotContains(t, got, "s3cret")
		}
		_, err := fsCall(wt, "write_file", map[string]string{"path": filepath.Join(parent, "planted.txt"), "content": "x"})
		assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err), "%v", err)
		assert.NoFileExists(t, filepath.Join(parent, "planted.txt"))
	})

	t.Run("a missing file is the tool's failure", func(t *testing.T) {
		_, err := fsCall(wt, "read_text_file", map[string]string{"path": "nope.txt"})
		assert.Equal(t, tool.CodeToolFailed, tool.CodeOf(err), "%v", err)
	})

	t.Run("needs a worktree", func(t *testing.T) {
		_, err := fsCall("", "list_allowed_directories", map[string]string{})
		assert.Equal(t, tool.CodePermissionDenied, tool.CodeOf(err))
		assert.ErrorContains(t, err, "not bound to a worktree")
	})

	t.Run("each worktree has its own server", func(t *testing.T) {
		other := t.TempDir()
		got, err := fsCall(other, "list_allowed_directories", map[string]string{})
		require.NoError(t, err)
		assert.Contains(t, got, other)
		assert.NotContains(t, got, wt)
		got, err = fsCall(wt, "list_allowed_directories", map[string]string{})
		require.NoError(t, err)
		assert.Contains(t, got, wt)
		assert.False(t, strings.Contains(got, other))
	})

	assert.Equal(t, 2, dials(), "one server process per worktree, reused across its calls")
}
