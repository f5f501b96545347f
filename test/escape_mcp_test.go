package test

import (
	"context"
	"encoding/json"
	"fmt"
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
// configuration, another worktree, the worker's environment and root through /proc, a link
// in the worktree to the SSH key, and writes outside the worktree (/dev/shm, /tmp, a new
// directory, a file moved out) are refused PERMISSION_DENIED, while the same operations
// inside the worktree and its twin paths work.
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
	// A link in the worktree to the SSH key, and one to a file of the worktree (the twin).
	if err := os.Symlink(ssh, filepath.Join(wt, "key")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(wt, "README"), filepath.Join(wt, "readme-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "movable"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wt, "movable2"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	worker := os.Getpid()
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
	mkdir := func(path string) func() error {
		return func() error { return call("create_directory", map[string]any{"path": path}) }
	}
	move := func(from, to string) func() error {
		return func() error { return call("move_file", map[string]any{"source": from, "destination": to}) }
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
		{"read the worker's environment", read(fmt.Sprintf("/proc/%d/environ", worker)), read("/proc/self/status")},
		{"read through the worker's /proc/<pid>/root", read(fmt.Sprintf("/proc/%d/root%s", worker, ssh)), read(filepath.Join(wt, "README"))},
		{"write /dev/shm", write("/dev/shm/sw4rm-escape-mcp"), write(filepath.Join(wt, "shm"))},
		{"write /tmp outside its $TMPDIR", write("/tmp/sw4rm-escape-mcp"), write(filepath.Join(wt, "tmp"))},
		{"create a directory outside the worktree", mkdir(filepath.Join(base, "newdir")), mkdir(filepath.Join(wt, "newdir"))},
		{"move a file of the worktree out", move(filepath.Join(wt, "movable"), filepath.Join(base, "moved")), move(filepath.Join(wt, "movable2"), filepath.Join(wt, "moved"))},
		{"a symbolic link in the worktree to the SSH key", read(filepath.Join(wt, "key")), read(filepath.Join(wt, "readme-link"))},
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
	for _, path := range []string{"/dev/shm/sw4rm-escape-mcp", "/tmp/sw4rm-escape-mcp", filepath.Join(base, "newdir"), filepath.Join(base, "moved")} {
		if _, err := os.Lstat(path); err == nil {
			t.Errorf("%s was written", path)
			_ = os.RemoveAll(path)
		}
	}
}
