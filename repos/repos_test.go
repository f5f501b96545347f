package repos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/repos"
)

// git runs git in dir and fails the test if it fails.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return string(out)
}

// newRepo makes a git repository with one commit.
func newRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	git(t, dir, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644))
	git(t, dir, "add", "README")
	git(t, dir, "commit", "-q", "-m", "first")
	return dir
}

func newManager(t *testing.T, root string, repoPaths map[string]string) *repos.Manager {
	t.Helper()
	m, err := repos.New(t.Context(), repoPaths, root)
	require.NoError(t, err)
	return m
}

func reasonOf(t *testing.T, err error) worktree.Reason {
	t.Helper()
	require.Error(t, err)
	var be *worktree.BindError
	require.True(t, errors.As(err, &be), "want a *worktree.BindError, got %T: %v", err, err)
	return be.Reason
}

// lockOf is the lock line of path in `git worktree list --porcelain`: ("", false) when not
// locked.
func lockOf(t *testing.T, repo, path string) (string, bool) {
	t.Helper()
	var cur string
	for line := range strings.SplitSeq(git(t, repo, "worktree", "list", "--porcelain"), "\n") {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "worktree":
			cur = val
		case "locked":
			if cur == path {
				return val, true
			}
		}
	}
	return "", false
}

func TestParse(t *testing.T) {
	got, err := repos.Parse(" app=/srv/app , docs=/srv/docs/ ,")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"app": "/srv/app", "docs": "/srv/docs"}, got)
	empty, err := repos.Parse("")
	require.NoError(t, err)
	assert.Empty(t, empty)
	for _, bad := range []string{"app", "app=", "=/srv/app", "app=relative/path", "a b=/srv", "app=/a,app=/b", "../x=/srv", "a/b=/srv"} {
		_, err := repos.Parse(bad)
		assert.Error(t, err, "%q must be refused", bad)
	}
}

func TestNewChecksRepositories(t *testing.T) {
	repo := newRepo(t)
	m := newManager(t, "", map[string]string{"app": repo})
	assert.Equal(t, []string{"app"}, m.RepoIDs())

	_, err := repos.New(t.Context(), map[string]string{"x": t.TempDir()}, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a git repository")
	_, err = repos.New(t.Context(), map[string]string{"x": filepath.Join(t.TempDir(), "missing")}, "")
	require.Error(t, err)
	_, err = repos.New(t.Context(), nil, "relative/root")
	require.Error(t, err, "the root must be absolute")

	none := newManager(t, "", nil)
	_, err = none.Ensure(t.Context(), repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeNotFound, reasonOf(t, err), "no repository configured")
}

// TestEnsureLocksAndReleases: a home worktree is made on sw4rm/<id>, locked for its agent,
// found again idempotently, refused to another agent while locked, and released.
func TestEnsureLocksAndReleases(t *testing.T) {
	repo := newRepo(t)
	m := newManager(t, "", map[string]string{"app": repo})
	ctx := t.Context()

	wt, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "alpha", Agent: "agent-a", Lock: true})
	require.NoError(t, err)
	real, err := filepath.EvalSymlinks(repo)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(real, repos.DefaultDirName, "alpha"), wt.Path)
	assert.Equal(t, "sw4rm/alpha", wt.Branch)
	assert.True(t, wt.Created)
	assert.True(t, wt.Locked)
	assert.FileExists(t, filepath.Join(wt.Path, "README"), "checked out from HEAD")
	assert.Equal(t, "sw4rm/alpha", strings.TrimSpace(git(t, wt.Path, "rev-parse", "--abbrev-ref", "HEAD")))
	reason, locked := lockOf(t, repo, wt.Path)
	assert.True(t, locked)
	assert.Equal(t, repos.LockReason("agent-a"), reason)
	assert.Empty(t, strings.TrimSpace(git(t, repo, "status", "--porcelain")), "the main checkout ignores the worktree directory")

	again, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "alpha", Agent: "agent-a", Lock: true})
	require.NoError(t, err, "idempotent for its agent")
	assert.False(t, again.Created)
	assert.True(t, again.Locked)
	assert.Equal(t, wt.Path, again.Path)

	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "alpha", Agent: "agent-b", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeLocked, reasonOf(t, err))
	assert.Contains(t, err.Error(), "locked by agent agent-a")

	// A non-home binding does not take the lock: the switch's approval lets it in.
	shared, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "alpha", Agent: "agent-b"})
	require.NoError(t, err)
	assert.False(t, shared.Locked)
	reason, _ = lockOf(t, repo, wt.Path)
	assert.Equal(t, repos.LockReason("agent-a"), reason, "the owner's lock stays")

	require.NoError(t, m.Release(ctx, "app", "alpha", "agent-b"), "not the holder: nothing to do")
	_, locked = lockOf(t, repo, wt.Path)
	assert.True(t, locked)
	require.NoError(t, m.Release(ctx, "app", "alpha", "agent-a"))
	_, locked = lockOf(t, repo, wt.Path)
	assert.False(t, locked)
	require.NoError(t, m.Release(ctx, "app", "alpha", "agent-a"), "idempotent")
	assert.DirExists(t, wt.Path, "the directory stays")

	b, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "alpha", Agent: "agent-b", Lock: true})
	require.NoError(t, err, "free again")
	assert.False(t, b.Created)
	reason, _ = lockOf(t, repo, wt.Path)
	assert.Equal(t, repos.LockReason("agent-b"), reason)
}

// TestEnsureUnderRoot: with a root, worktrees live in <root>/<repo_id>/<worktree_id>.
func TestEnsureUnderRoot(t *testing.T) {
	repo := newRepo(t)
	root := t.TempDir()
	m := newManager(t, root, map[string]string{"app": repo})
	wt, err := m.Ensure(t.Context(), repos.EnsureRequest{RepoID: "app", WorktreeID: "w1", Agent: "a", Lock: true})
	require.NoError(t, err)
	realRoot, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(realRoot, "app", "w1"), wt.Path)
	p, err := m.Path(t.Context(), "app", "w1")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(realRoot, "app", "w1"), p)
	assert.NoDirExists(t, filepath.Join(repo, repos.DefaultDirName))
}

// TestEnsureReusesBranch: a worktree removed while its branch stays is made again on that
// branch, with its commits.
func TestEnsureReusesBranch(t *testing.T) {
	repo := newRepo(t)
	m := newManager(t, "", map[string]string{"app": repo})
	ctx := t.Context()
	wt, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a"})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "work.txt"), []byte("x"), 0o644))
	git(t, wt.Path, "add", "work.txt")
	git(t, wt.Path, "commit", "-q", "-m", "work")
	git(t, repo, "worktree", "remove", wt.Path)

	again, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a", Lock: true})
	require.NoError(t, err)
	assert.True(t, again.Created)
	assert.FileExists(t, filepath.Join(again.Path, "work.txt"), "the branch's commit is checked out")

	// A worktree whose directory vanished while registered (and locked) is made again.
	require.NoError(t, os.RemoveAll(again.Path))
	third, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a", Lock: true})
	require.NoError(t, err)
	assert.True(t, third.Created)
	assert.FileExists(t, filepath.Join(third.Path, "work.txt"))
}

// TestEnsureRefusals: what is not sw4rm's, or not there, is refused with §16.3's reasons.
func TestEnsureRefusals(t *testing.T) {
	repo := newRepo(t)
	m := newManager(t, "", map[string]string{"app": repo})
	ctx := t.Context()

	_, err := m.Ensure(ctx, repos.EnsureRequest{RepoID: "other", WorktreeID: "w", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeNotFound, reasonOf(t, err), "repository not configured")
	assert.Contains(t, err.Error(), "SW4RM_REPOS has app")

	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "../x", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeNotFound, reasonOf(t, err), "an invalid id names no worktree")

	// A directory that is not a worktree is left alone.
	plain := filepath.Join(repo, repos.DefaultDirName, "plain")
	require.NoError(t, os.MkdirAll(plain, 0o755))
	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "plain", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonFilesystemError, reasonOf(t, err))
	assert.Contains(t, err.Error(), "is not a worktree")

	// A worktree at the place of ours but on another branch is not ours.
	git(t, repo, "worktree", "add", "-q", "-b", "feature", filepath.Join(repo, repos.DefaultDirName, "theirs"))
	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "theirs", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonPermissionDenied, reasonOf(t, err))

	// A worktree a person locked is worktree_locked.
	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "held", Agent: "a"})
	require.NoError(t, err)
	git(t, repo, "worktree", "lock", "--reason", "on loan", filepath.Join(repo, repos.DefaultDirName, "held"))
	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "held", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeLocked, reasonOf(t, err))
	assert.Contains(t, err.Error(), `"on loan"`)

	// Our branch checked out elsewhere by a person: git refuses a second checkout.
	git(t, repo, "branch", "sw4rm/busy")
	git(t, repo, "worktree", "add", "-q", filepath.Join(t.TempDir(), "elsewhere"), "sw4rm/busy")
	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "busy", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeLocked, reasonOf(t, err))
	assert.Contains(t, err.Error(), "already")

	// The repository deleted after start: worktree_not_found.
	require.NoError(t, os.RemoveAll(repo))
	_, err = m.Ensure(ctx, repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeNotFound, reasonOf(t, err))
	require.NoError(t, m.Release(ctx, "app", "w", "a"), "nothing left to release")
}

// TestEnsurePermissionDenied: a root the server may not write to is permission_denied.
func TestEnsurePermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root is never refused by file modes")
	}
	repo := newRepo(t)
	root := t.TempDir()
	m := newManager(t, root, map[string]string{"app": repo})
	require.NoError(t, os.Chmod(root, 0o555))
	t.Cleanup(func() { _ = os.Chmod(root, 0o755) })
	_, err := m.Ensure(t.Context(), repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonPermissionDenied, reasonOf(t, err))
}

// TestConcurrentEnsure: many agents binding worktrees of one repository at once all succeed
// — through one manager (serialized in the process) and through two (as two worker
// processes would, meeting on git's lock files).
func TestConcurrentEnsure(t *testing.T) {
	repo := newRepo(t)
	ms := []*repos.Manager{newManager(t, "", map[string]string{"app": repo}), newManager(t, "", map[string]string{"app": repo})}
	var wg sync.WaitGroup
	errs := make([]error, 12)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = ms[i%2].Ensure(context.Background(), repos.EnsureRequest{RepoID: "app", WorktreeID: fmt.Sprintf("w%d", i), Agent: fmt.Sprintf("a%d", i), Lock: true})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "agent a%d", i)
	}
	out := git(t, repo, "worktree", "list", "--porcelain")
	assert.Equal(t, 12, strings.Count(out, "locked "+repos.LockReason("a")), "every worktree is locked by its agent")
}

// TestContentionRetried: a git lock file held by another process is waited for; one that
// stays held is worktree_locked.
func TestContentionRetried(t *testing.T) {
	repo := newRepo(t)
	m := newManager(t, "", map[string]string{"app": repo})
	refLock := filepath.Join(repo, ".git", "refs", "heads", "sw4rm", "w.lock")
	require.NoError(t, os.MkdirAll(filepath.Dir(refLock), 0o755))
	require.NoError(t, os.WriteFile(refLock, nil, 0o644))
	go func() {
		time.Sleep(150 * time.Millisecond)
		_ = os.Remove(refLock)
	}()
	_, err := m.Ensure(t.Context(), repos.EnsureRequest{RepoID: "app", WorktreeID: "w", Agent: "a", Lock: true})
	require.NoError(t, err, "the lock was released while Ensure retried")

	stuck := filepath.Join(repo, ".git", "refs", "heads", "sw4rm", "x.lock")
	require.NoError(t, os.WriteFile(stuck, nil, 0o644))
	_, err = m.Ensure(t.Context(), repos.EnsureRequest{RepoID: "app", WorktreeID: "x", Agent: "a", Lock: true})
	assert.Equal(t, worktree.ReasonWorktreeLocked, reasonOf(t, err))
	assert.Contains(t, err.Error(), "lock file stayed held")
}
