package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParsePaths(t *testing.T) {
	got, err := ParsePaths(" /opt/go , ,/var/cache/x/:/a/../b")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/opt/go", "/var/cache/x", "/b"}; !slices.Equal(got, want) {
		t.Errorf("ParsePaths = %v, want %v", got, want)
	}
	if _, err := ParsePaths("relative/path"); err == nil {
		t.Error("a relative path was accepted")
	}
}

// TestGitPaths: a linked worktree's own git directory is writable; of the common directory
// only what git reads is granted, read-only, and never hooks or other worktrees'
// directories; a worktree whose .git is a directory needs nothing outside.
func TestGitPaths(t *testing.T) {
	repo := t.TempDir()
	common := filepath.Join(repo, ".git")
	gitdir := filepath.Join(common, "worktrees", "a")
	wt := filepath.Join(repo, "wt", "a")
	for _, d := range []string{gitdir, filepath.Join(common, "worktrees", "b"), filepath.Join(common, "objects"), filepath.Join(common, "refs"), filepath.Join(common, "hooks"), wt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, content := range map[string]string{
		filepath.Join(wt, ".git"):            "gitdir: " + gitdir + "\n",
		filepath.Join(gitdir, "commondir"):   "../..\n",
		filepath.Join(common, "config"):      "[core]\n",
		filepath.Join(common, "HEAD"):        "ref: refs/heads/main\n",
		filepath.Join(common, "packed-refs"): "",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rw, ro := GitPaths(wt)
	if !slices.Equal(rw, []string{gitdir}) {
		t.Errorf("read-write = %v, want only %s", rw, gitdir)
	}
	want := []string{"objects", "refs", "packed-refs", "config", "HEAD"}
	var got []string
	for _, p := range ro {
		if filepath.Dir(p) != common {
			t.Errorf("read-only %s is not directly in the common directory", p)
		}
		got = append(got, filepath.Base(p))
	}
	if !slices.Equal(got, want) {
		t.Errorf("read-only = %v, want %v (no hooks, no worktrees)", got, want)
	}
	clone := t.TempDir()
	if err := os.Mkdir(filepath.Join(clone, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if rw, ro := GitPaths(clone); rw != nil || ro != nil {
		t.Errorf("a clone's GitPaths = %v, %v, want none", rw, ro)
	}
}

func TestInstallRoot(t *testing.T) {
	for path, want := range map[string]string{
		"/home/u/.cache/sw4rm/mcp/node_modules/.bin/mcp-server-filesystem":                            "/home/u/.cache/sw4rm/mcp",
		"/home/u/.cache/sw4rm/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js": "/home/u/.cache/sw4rm/mcp",
		"/srv/app/node_modules/a/node_modules/b/bin/x.js":                                             "/srv/app",
		"/usr/local/bin/server": "/usr/local/bin",
	} {
		if got := installRoot(path); got != want {
			t.Errorf("installRoot(%s) = %s, want %s", path, got, want)
		}
	}
}
