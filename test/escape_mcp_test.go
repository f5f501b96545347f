package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools/mcp"
)

// TestEscapeMCPServer: an MCP filesystem server started per worktree runs in the same
// sandbox as process.run (tools/mcp sandbox.go). It is started here with "/" among its
// allowed directories — an operator's mistake — so that nothing but the kernel stands
// between it and the server's files: reads of the server's home and SSH key, its
// configuration, another worktree, and writes outside the worktree are refused
// PERMISSION_DENIED, while the same operations inside the worktree and its twin paths work.
// The escape suite's figure is logged like tools/builtin's.
func TestEscapeMCPServer(t *testing.T) {
	bin := mcpServerBin(t, "mcp-server-filesystem")
	if err := sandbox.Available(); err != nil {
		t.Skipf("the host cannot confine processes: %v", err)
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wt, other := filepath.Join(base, "wt"), filepath.Join(base, "other")
	ssh := filepath.Join(base, "home", ".ssh", "id_ed25519")
	config := filepath.Join(base, "etc", "sw4rm.env")
	for path, content := range map[string]string{
		ssh:                            "fake key\n",
		config:                         "SW4RM_DATABASE_URL=postgres://sw4rm:hunter2@db/sw4rm\n",
		filepath.Join(other, "README"): "another agent's\n",
		filepath.Join(wt, "README"):    "mine\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := mcp.Provider{ID: "fs", Server: mcp.Server{Command: []string{bin, mcp.WorktreePlaceholder, "/"}, Sandbox: sandbox.DefaultPolicy()}}
	s, err := p.ServerFor(wt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := mcp.Connect(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	call := func(name string, args map[string]any) error {
		b, _ := json.Marshal(args)
		_, err := c.CallTool(ctx, name, b)
		return err
	}
	read := func(path string) func() error {
		return func() error { return call("read_text_file", map[string]any{"path": path}) }
	}
	write := func(path string) func() error {
		return func() error { return call("write_file", map[string]any{"path": path, "content": "x"}) }
	}
	list := func(path string) func() error {
		return func() error { return call("list_directory", map[string]any{"path": path}) }
	}
	attempts := []struct {
		name          string
		attempt, twin func() error
	}{
		{"read ~/.ssh/id_*", read(ssh), read(filepath.Join(wt, "README"))},
		{"list the server's home", list(filepath.Dir(filepath.Dir(ssh))), list(wt)},
		{"read the server's configuration", read(config), read(filepath.Join(wt, "README"))},
		{"read another agent's worktree", read(filepath.Join(other, "README")), read(filepath.Join(wt, "README"))},
		{"write another agent's worktree", write(filepath.Join(other, "pwned")), write(filepath.Join(wt, "mine"))},
		{"write outside the worktree", write(filepath.Join(base, "new")), write(filepath.Join(wt, "new"))},
		{"read /etc/shadow", read("/etc/shadow"), read("/etc/passwd")},
	}
	var refused, twins int
	for _, a := range attempts {
		if err := a.attempt(); tool.CodeOf(err) == tool.CodePermissionDenied {
			refused++
		} else {
			t.Errorf("%s: error = %v, want PERMISSION_DENIED", a.name, err)
		}
		if err := a.twin(); err == nil {
			twins++
		} else {
			t.Errorf("%s: the twin failed: %v", a.name, err)
		}
	}
	t.Logf("escape suite (MCP filesystem server): %d attempts, %d refused, %d twins passed", len(attempts), refused, twins)
	if _, err := os.Stat(filepath.Join(other, "pwned")); err == nil {
		t.Error("another agent's worktree was written")
	}
}
