//go:build linux

package confine_test

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/confine"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
)

// tree is a worktree with traps in it, beside files outside it that nothing may reach:
//
//	base/outside/secret, base/outside/dir/x   what escapes would reach
//	base/wtx/secret                           a sibling whose name extends the worktree's
//	base/wt/                                  the worktree
//	  .git/{config,HEAD,hooks/}   mod/.git (a submodule's .git file)   mod/.gitignore
//	  a/b/file.txt  docs/readme.md  plain  .github/ci.yml  deep/  back\slash
//	  proc/self/root/etc/passwd   (an ordinary directory that looks like /proc)
//	  fifo  sock  dev (a character device, when the tests run as root)
//	  links: see the table in newTree
type tree struct {
	base, wt string
	hasDev   bool
}

func newTree(t testing.TB) tree {
	t.Helper()
	// Not t.TempDir: a unix socket's path must stay under 108 bytes, and subtest names
	// make t.TempDir's paths long.
	base, err := os.MkdirTemp("", "cf")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	base, err = filepath.EvalSymlinks(base)
	require.NoError(t, err)
	wt := filepath.Join(base, "wt")
	files := map[string]string{
		"outside/secret":               "SECRET",
		"outside/dir/x":                "OUTSIDE-X",
		"wtx/secret":                   "SIBLING",
		"wt/.git/config":               "[core]\n",
		"wt/.git/HEAD":                 "ref: refs/heads/main\n",
		"wt/mod/.git":                  "gitdir: ../.git/modules/mod\n",
		"wt/mod/.gitignore":            "*.o\n",
		"wt/a/b/file.txt":              "FILE",
		"wt/docs/readme.md":            "README",
		"wt/plain":                     "PLAIN",
		"wt/.github/ci.yml":            "on: push\n",
		"wt/proc/self/root/etc/passwd": "FAKE",
		`wt/back\slash`:                "BACKSLASH",
		"wt/deep/.keep":                "",
		"wt/.git/hooks/.keep":          "",
		"wt/.github/hooks/.keep":       "",
	}
	require.NoError(t, os.MkdirAll(filepath.Join(wt, "emptydir"), 0o755))
	for name, content := range files {
		p := filepath.Join(base, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	links := map[string]string{
		"esc_rel":     "../outside/secret",
		"in_rel":      "a/b/file.txt",
		"esc_abs":     filepath.Join(base, "outside/secret"),
		"esc_dir":     "../outside/dir",
		"in_dir":      "a/b",
		"esc_abs_dir": filepath.Join(base, "outside/dir"),
		"chain1":      "chain2",
		"chain2":      "chain3",
		"chain3":      "../outside/secret",
		"ichain1":     "ichain2",
		"ichain2":     "ichain3",
		"ichain3":     "a/b/file.txt",
		"deep/esc":    "../../outside",
		"deep/in":     "../a",
		"proc_link":   "/proc/self/root",
		"plink":       "proc/self/root",
		"git_link":    ".git",
		"docs_link":   "docs",
		"fifo_link":   "fifo",
	}
	for name, target := range links {
		require.NoError(t, os.Symlink(target, filepath.Join(wt, name)))
	}
	require.NoError(t, syscall.Mkfifo(filepath.Join(wt, "fifo"), 0o644))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(wt, "sock"), Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false) // the socket file stays after the listener is gone
	require.NoError(t, l.Close())
	tr := tree{base: base, wt: wt}
	// A character device (1,3 is /dev/null's) needs CAP_MKNOD; without it those cases skip.
	if err := syscall.Mknod(filepath.Join(wt, "dev"), syscall.S_IFCHR|0o666, 1<<8|3); err == nil {
		tr.hasDev = true
	}
	return tr
}

// snapshot records what refused operations must leave alone: everything outside the
// worktree and everything in its .git entries (or, when dirs are given, those paths under
// base).
func (tr tree) snapshot(t testing.TB, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if len(dirs) == 0 {
		dirs = []string{"outside", "wtx", "wt/.git", "wt/mod/.git"}
	}
	for _, dir := range dirs {
		root := filepath.Join(tr.base, dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(tr.base, p)
			if d.IsDir() {
				out[rel] = "<dir>"
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

// action is one operation of a Root on one path.
type action struct {
	op string
	do func(r *confine.Root, p string) error
}

var (
	read = action{confine.OpRead, func(r *confine.Root, p string) error {
		_, err := r.ReadFile(p)
		return err
	}}
	write = action{confine.OpWrite, func(r *confine.Root, p string) error {
		return r.WriteFile(p, []byte("WRITTEN"), 0o644)
	}}
	openRW = action{confine.OpOpen, func(r *confine.Root, p string) error {
		f, err := r.OpenFile(p, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return err
	}}
	stat = action{confine.OpStat, func(r *confine.Root, p string) error {
		_, err := r.Stat(p)
		return err
	}}
	lstat = action{confine.OpLstat, func(r *confine.Root, p string) error {
		_, err := r.Lstat(p)
		return err
	}}
	readDir = action{confine.OpReadDir, func(r *confine.Root, p string) error {
		_, err := r.ReadDir(p)
		return err
	}}
	mkdirAll = action{confine.OpMkdir, func(r *confine.Root, p string) error { return r.MkdirAll(p, 0o755) }}
	remove   = action{confine.OpRemove, func(r *confine.Root, p string) error { return r.Remove(p) }}
)

// renameTo renames the path under test to dst; renameFrom renames src to the path under test.
func renameTo(dst string) action {
	return action{confine.OpRename, func(r *confine.Root, p string) error { return r.Rename(p, dst) }}
}

func renameFrom(src string) action {
	return action{confine.OpRename, func(r *confine.Root, p string) error { return r.Rename(src, p) }}
}

// TestEscapeSuite tries every way out of the worktree and into its .git the package knows
// of. Each case is refused with ErrPermissionDenied, audited once, and leaves everything
// outside the worktree and in .git as it was; its twin — a path of the same shape that stays
// inside — is tried on a fresh tree and succeeds, unaudited, to show the refusal is not an
// accident of shape. {wt} and {base} stand for the worktree's and its parent's absolute paths.
func TestEscapeSuite(t *testing.T) {
	cases := []struct {
		name      string
		act       action
		bad, good string
		dev       bool // needs the character device
	}{
		// Path traversal.
		{"dot-dot", read, "../outside/secret", "a/../a/b/file.txt", false},
		{"dot-dot after a directory", read, "a/../../outside/secret", "a/b/../b/file.txt", false},
		{"deep dot-dot", read, "a/b/../../../outside/secret", "a/b/../../docs/readme.md", false},
		{"the parent itself", stat, "..", "a/..", false},
		{"list the parent's sibling", readDir, "../outside", "a/../docs", false},
		{"create a directory outside", mkdirAll, "../outside/new", "a/../docs/new", false},
		{"remove outside", remove, "../outside/secret", "a/../plain", false},
		{"rename from outside", renameTo("stolen"), "../outside/secret", "plain", false},
		{"rename to outside", renameFrom("plain"), "../outside/moved", "a/moved", false},
		{"Windows-style dot-dot", read, `..\..\outside\secret`, `back\slash`, false},
		{"Windows-style dot-dot inside a name", read, `a\..\..\outside`, `back\slash`, false},
		// Absolute paths.
		{"absolute system file", read, "/etc/passwd", "{wt}/a/b/file.txt", false},
		{"absolute outside", read, "{base}/outside/secret", "{wt}/docs/readme.md", false},
		{"absolute then dot-dot", read, "{wt}/../outside/secret", "{wt}/a/../docs/readme.md", false},
		{"sibling sharing the prefix", read, "{wt}x/secret", "{wt}/plain", false},
		{"list the filesystem root", readDir, "/", "{wt}/", false},
		{"/proc/self/root", read, "/proc/self/root/etc/passwd", "proc/self/root/etc/passwd", false},
		{"/proc/self/root back into the worktree", read, "/proc/self/root{wt}/plain", "{wt}/plain", false},
		// Symbolic links.
		{"relative link out", read, "esc_rel", "in_rel", false},
		{"absolute link out", read, "esc_abs", "in_rel", false},
		{"linked directory in the middle", read, "esc_dir/x", "in_dir/file.txt", false},
		{"absolute linked directory in the middle", read, "esc_abs_dir/x", "in_dir/file.txt", false},
		{"list a linked directory", readDir, "esc_dir", "in_dir", false},
		{"link with a trailing slash", stat, "esc_dir/", "in_dir/", false},
		{"lstat of a link with a trailing slash", lstat, "esc_dir/", "in_dir/", false},
		{"remove through a link with a trailing slash", remove, "esc_dir/", "emptydir/", false},
		{"chain of links", read, "chain1", "ichain1", false},
		{"link in a subdirectory", read, "deep/esc/secret", "deep/in/b/file.txt", false},
		{"link to /proc/self/root", read, "proc_link/etc/passwd", "plink/etc/passwd", false},
		{"write through a link out", write, "esc_rel", "in_rel", false},
		{"create through a linked directory", write, "esc_dir/new", "in_dir/new", false},
		{"mkdir through a linked directory", mkdirAll, "esc_dir/new", "in_dir/new", false},
		{"remove through a linked directory", remove, "esc_dir/x", "in_dir/file.txt", false},
		{"rename into a linked directory", renameFrom("plain"), "esc_dir/moved", "in_dir/moved", false},
		// .git.
		{"write .git/config", write, ".git/config", ".github/ci.yml", false},
		{"overwrite a submodule's .git file", write, "mod/.git", "mod/.gitignore", false},
		{"open .git/HEAD read-write", openRW, ".git/HEAD", ".github/ci.yml", false},
		{"plant a hook directory", mkdirAll, ".git/hooks/evil", ".github/hooks/evil", false},
		{"remove .git/HEAD", remove, ".git/HEAD", ".github/ci.yml", false},
		{"remove a submodule's .git file", remove, "mod/.git", "mod/.gitignore", false},
		{"rename .git away", renameTo("notgit"), ".git", ".github", false},
		{"rename into .git/hooks", renameFrom("plain"), ".git/hooks/pre-commit", ".github/pre-commit", false},
		{"write through a link to .git", write, "git_link/config", "docs_link/config", false},
		{"write .git after dot-dot", write, "a/../.git/config", "a/../.github/ci.yml", false},
		{".git in another case", mkdirAll, ".GIT/hooks", ".GITX/hooks", false},
		// Special files.
		{"read a FIFO", read, "fifo", "plain", false},
		{"write a FIFO", write, "fifo", "plain", false},
		{"read a FIFO through a link", read, "fifo_link", "in_rel", false},
		{"list a FIFO", readDir, "fifo", "docs", false},
		{"open a socket", openRW, "sock", "plain", false},
		{"read a socket", read, "sock", "plain", false},
		{"read a device", read, "dev", "plain", true},
		{"write a device", write, "dev", "plain", true},
		// NUL bytes.
		{"NUL then traversal", read, "plain\x00../../../etc/passwd", "plain", false},
		{"NUL in a created name", write, "new\x00file", "newfile", false},
	}
	require.GreaterOrEqual(t, len(cases), 30)
	type call struct {
		op, path string
		err      error
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Run("refused", func(t *testing.T) {
				tr := newTree(t)
				if c.dev && !tr.hasDev {
					t.Skip("creating a device node needs CAP_MKNOD")
				}
				var calls []call
				r := openRoot(t, tr.wt, confine.WithAudit(func(op, path string, err error) {
					calls = append(calls, call{op, path, err})
				}))
				before := tr.snapshot(t)
				p := tr.expand(c.bad)

				err := c.act.do(r, p)

				require.Error(t, err)
				t.Log(err)
				assert.ErrorIs(t, err, confine.ErrPermissionDenied)
				assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, protocol.CodeOf(err))
				var ce *confine.Error
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, c.act.op, ce.Op)
				assert.Equal(t, p, ce.Path)
				assert.True(t, strings.HasPrefix(err.Error(), "permission_denied: "+c.act.op+" "), err.Error())
				require.Len(t, calls, 1, "one audit call per refusal")
				assert.Equal(t, call{c.act.op, p, err}, calls[0])
				assert.Equal(t, before, tr.snapshot(t), "nothing outside the worktree or in .git changed")
			})
			t.Run("twin allowed", func(t *testing.T) {
				tr := newTree(t)
				var calls []call
				r := openRoot(t, tr.wt, confine.WithAudit(func(op, path string, err error) {
					calls = append(calls, call{op, path, err})
				}))
				before := tr.snapshot(t)

				require.NoError(t, c.act.do(r, tr.expand(c.good)))

				assert.Empty(t, calls)
				assert.Equal(t, before, tr.snapshot(t))
			})
		})
	}
}

func (tr tree) expand(p string) string {
	return strings.NewReplacer("{wt}", tr.wt, "{base}", tr.base).Replace(p)
}

// TestReadsLandInside checks what the twins of the suite read: the worktree's own files,
// never the ones outside.
func TestReadsLandInside(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)
	for p, want := range map[string]string{
		"in_rel":                      "FILE",
		"ichain1":                     "FILE",
		"in_dir/file.txt":             "FILE",
		"deep/in/b/file.txt":          "FILE",
		"plink/etc/passwd":            "FAKE",
		"proc/self/root/etc/passwd":   "FAKE",
		tr.wt + "/a/../plain":         "PLAIN",
		`back\slash`:                  "BACKSLASH",
		"a/b/../../docs/readme.md":    "README",
		"./a//b/./file.txt":           "FILE",
		tr.wt + "/a/b/file.txt":       "FILE",
		"docs_link/../plain":          "PLAIN", // ".." after a link applies to the link's target
		"in_dir/../../docs/readme.md": "README",
	} {
		got, err := r.ReadFile(p)
		require.NoError(t, err, p)
		assert.Equal(t, want, string(got), p)
	}
}

func TestSpecialFilesMayBeStatted(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)
	fi, err := r.Stat("fifo_link")
	require.NoError(t, err, "Stat opens nothing, so it may describe a FIFO")
	assert.Equal(t, fs.ModeNamedPipe, fi.Mode().Type())
	fi, err = r.Lstat("sock")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSocket, fi.Mode().Type())
	require.NoError(t, r.Remove("fifo"), "a FIFO may be removed: that opens nothing either")
	_, err = os.Lstat(filepath.Join(tr.wt, "fifo"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestSymlinkLoopIsAnErrorNotARefusal(t *testing.T) {
	tr := newTree(t)
	require.NoError(t, os.Symlink("loop2", filepath.Join(tr.wt, "loop1")))
	require.NoError(t, os.Symlink("loop1", filepath.Join(tr.wt, "loop2")))
	audited := 0
	r := openRoot(t, tr.wt, confine.WithAudit(func(string, string, error) { audited++ }))
	_, err := r.ReadFile("loop1")
	require.Error(t, err)
	assert.NotErrorIs(t, err, confine.ErrPermissionDenied)
	assert.Contains(t, err.Error(), "too many levels of symbolic links")
	assert.Zero(t, audited)
}

func TestRefusalsReadAsProtocolErrors(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)
	err := r.WriteFile(".git/config", nil, 0o644)
	assert.EqualError(t, err, `permission_denied: write ".git/config": writes into .git are refused`)
	var pe *protocol.Error
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, commonpb.ErrorCode_PERMISSION_DENIED, pe.Code)
	assert.Equal(t, `permission_denied: write ".git/config": writes into .git are refused`, pe.Error())
	_, err = r.ReadFile("fifo")
	assert.EqualError(t, err, `permission_denied: read "fifo": a FIFO is not a regular file or directory`)
	_, err = r.ReadFile("esc_abs")
	assert.EqualError(t, err, `permission_denied: read "esc_abs": the symbolic link "esc_abs" has an absolute target`)
	_, err = r.ReadFile("a\x00")
	assert.EqualError(t, err, `permission_denied: read "a\x00": the path contains a NUL byte`)
}

// openRoot opens a worktree for a test and closes it when the test ends.
func openRoot(t testing.TB, dir string, opts ...confine.Option) *confine.Root {
	t.Helper()
	r, err := confine.Open(dir, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	return r
}
