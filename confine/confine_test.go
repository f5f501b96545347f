//go:build linux

package confine_test

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/confine"
)

func TestOpen(t *testing.T) {
	_, err := confine.Open("")
	assert.ErrorContains(t, err, "directory is required")
	_, err = confine.Open("/")
	assert.ErrorContains(t, err, "filesystem root")
	_, err = confine.Open(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	tr := newTree(t)
	_, err = confine.Open(filepath.Join(tr.wt, "plain"))
	assert.Error(t, err, "a file is no worktree")

	// A worktree reached through a link: Dir is the real place, and absolute paths under
	// either spelling are taken relative to it.
	via := filepath.Join(tr.base, "via")
	require.NoError(t, os.Symlink("wt", via))
	r := openRoot(t, via)
	assert.Equal(t, tr.wt, r.Dir())
	for _, p := range []string{via + "/plain", tr.wt + "/plain", "plain", "./plain", via + "/a/../plain"} {
		got, err := r.ReadFile(p)
		require.NoError(t, err, p)
		assert.Equal(t, "PLAIN", string(got), p)
	}
	entries, err := r.ReadDir(via)
	require.NoError(t, err)
	assert.NotEmpty(t, entries)
}

func TestFileOperations(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)

	// WriteFile creates with the permission given (umask aside) and truncates.
	require.NoError(t, r.WriteFile("new.txt", []byte("long content"), 0o600))
	require.NoError(t, r.WriteFile("new.txt", []byte("short"), 0o644))
	got, err := os.ReadFile(filepath.Join(tr.wt, "new.txt"))
	require.NoError(t, err)
	assert.Equal(t, "short", string(got))
	fi, err := r.Stat("new.txt")
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "an existing file keeps its mode")

	// OpenFile honours O_TRUNC, O_APPEND and O_EXCL.
	f, err := r.OpenFile("new.txt", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("+more")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	got, _ = r.ReadFile("new.txt")
	assert.Equal(t, "short+more", string(got))
	f, err = r.OpenFile("new.txt", os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	assert.Empty(t, b)
	require.NoError(t, f.Close())
	_, err = r.OpenFile("new.txt", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	assert.ErrorIs(t, err, fs.ErrExist)

	// Reading .git is allowed; only writes are refused.
	got, err = r.ReadFile(".git/HEAD")
	require.NoError(t, err)
	assert.Equal(t, "ref: refs/heads/main\n", string(got))
	_, err = r.ReadDir(".git")
	require.NoError(t, err)
	f, err = r.Open(".git/config")
	require.NoError(t, err)
	f.Close()

	// Writing through a link inside writes the target.
	require.NoError(t, r.WriteFile("in_rel", []byte("via link"), 0o644))
	got, _ = os.ReadFile(filepath.Join(tr.wt, "a/b/file.txt"))
	assert.Equal(t, "via link", string(got))

	// A link dangling inside is created through.
	require.NoError(t, os.Symlink("a/created-later", filepath.Join(tr.wt, "dangling")))
	require.NoError(t, r.WriteFile("dangling", []byte("made"), 0o644))
	got, _ = os.ReadFile(filepath.Join(tr.wt, "a/created-later"))
	assert.Equal(t, "made", string(got))

	// MkdirAll, ReadDir (sorted), Rename, Remove.
	require.NoError(t, r.MkdirAll("x/y/z", 0o755))
	require.NoError(t, r.WriteFile("x/y/b", nil, 0o644))
	require.NoError(t, r.WriteFile("x/y/a", nil, 0o644))
	entries, err := r.ReadDir("x/y")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"a", "b", "z"}, names)
	require.NoError(t, r.Rename("x/y/a", "x/moved"))
	_, err = os.Stat(filepath.Join(tr.wt, "x/moved"))
	require.NoError(t, err)
	require.NoError(t, r.Remove("x/moved"))
	_, err = os.Stat(filepath.Join(tr.wt, "x/moved"))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	// Removing or renaming a link acts on the link, even one that points out.
	require.NoError(t, r.Remove("esc_rel"))
	_, err = os.Lstat(filepath.Join(tr.wt, "esc_rel"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(filepath.Join(tr.base, "outside/secret"))
	require.NoError(t, err, "the target outside is untouched")
	require.NoError(t, r.Rename("esc_abs", "renamed_link"))
	target, err := os.Readlink(filepath.Join(tr.wt, "renamed_link"))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(tr.base, "outside/secret"), target)
	fi, err = r.Lstat("renamed_link")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())
}

func TestOrdinaryErrorsAreNotRefusals(t *testing.T) {
	tr := newTree(t)
	audited := 0
	r := openRoot(t, tr.wt, confine.WithAudit(func(string, string, error) { audited++ }))
	cases := map[string]error{
		"missing":           fs.ErrNotExist,
		"missing/deeper":    fs.ErrNotExist,
		"in_rel/../plain":   nil, // nil: a file used as a directory, checked below
		"plain/x":           nil,
		"plain/":            nil,
		"":                  fs.ErrInvalid,
		"a/b/file.txt/../x": nil,
	}
	for p, want := range cases {
		_, err := r.ReadFile(p)
		require.Error(t, err, p)
		assert.NotErrorIs(t, err, confine.ErrPermissionDenied, p)
		if want != nil {
			assert.ErrorIs(t, err, want, p)
		} else {
			assert.Contains(t, err.Error(), "not a directory", p)
		}
	}
	_, err := r.ReadFile("a")
	assert.ErrorContains(t, err, "is a directory")
	assert.Zero(t, audited)
}

func TestConcurrentUse(t *testing.T) {
	tr := newTree(t)
	r := openRoot(t, tr.wt)
	done := make(chan error)
	for i := range 8 {
		go func() {
			name := "c" + strings.Repeat("x", i)
			if err := r.WriteFile(name, []byte(name), 0o644); err != nil {
				done <- err
				return
			}
			got, err := r.ReadFile(name)
			if err == nil && string(got) != name {
				err = io.ErrUnexpectedEOF
			}
			if _, rerr := r.ReadFile("esc_rel"); rerr == nil {
				err = io.ErrUnexpectedEOF
			}
			done <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-done)
	}
}
