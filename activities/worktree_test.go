package activities

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/store/memory"
)

// gitRepo makes a git repository with one commit.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"commit", "-q", "--allow-empty", "-m", "first"}} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	return dir
}

// TestEnsureWorktreeActivity: a bind makes the worktree; a failure is a non-retryable
// application error typed with its §16.3 reason, which ReasonOfActivityError reads back; a
// release unlocks.
func TestEnsureWorktreeActivity(t *testing.T) {
	repo := gitRepo(t)
	m, err := repos.New(t.Context(), map[string]string{"app": repo}, "")
	require.NoError(t, err)
	st := memory.New()
	a := &Activities{Store: st, Sink: audit.New(nil, st.Audit()), Repos: m}

	got, err := a.EnsureWorktree(t.Context(), EnsureWorktreeInput{AgentID: "coder", RepoID: "app", WorktreeID: "w1", Lock: true})
	require.NoError(t, err)
	assert.Equal(t, "sw4rm/w1", got.Branch)
	assert.True(t, got.Created)
	assert.DirExists(t, got.Path)

	_, err = a.EnsureWorktree(t.Context(), EnsureWorktreeInput{AgentID: "other", RepoID: "app", WorktreeID: "w1", Lock: true})
	var app *temporal.ApplicationError
	require.True(t, errors.As(err, &app), "%v", err)
	assert.True(t, app.NonRetryable(), "the workflow retries binds itself")
	assert.Equal(t, string(worktree.ReasonWorktreeLocked), app.Type())
	r, msg := ReasonOfActivityError(err)
	assert.Equal(t, worktree.ReasonWorktreeLocked, r)
	assert.Contains(t, msg, "locked by agent coder")

	_, err = a.EnsureWorktree(t.Context(), EnsureWorktreeInput{AgentID: "coder", RepoID: "missing", WorktreeID: "w1", Lock: true})
	r, _ = ReasonOfActivityError(err)
	assert.Equal(t, worktree.ReasonWorktreeNotFound, r)
	r, _ = ReasonOfActivityError(errors.New("activity StartToClose timeout"))
	assert.Equal(t, worktree.ReasonFilesystemError, r, "anything unclassified")

	require.NoError(t, a.ReleaseWorktree(t.Context(), ReleaseWorktreeInput{AgentID: "coder", RepoID: "app", WorktreeID: "w1"}))
	_, err = a.EnsureWorktree(t.Context(), EnsureWorktreeInput{AgentID: "other", RepoID: "app", WorktreeID: "w1", Lock: true})
	require.NoError(t, err, "released")

	none := &Activities{Store: st, Sink: audit.New(nil, st.Audit())}
	_, err = none.EnsureWorktree(t.Context(), EnsureWorktreeInput{AgentID: "coder", RepoID: "app", WorktreeID: "w1", Lock: true})
	r, _ = ReasonOfActivityError(err)
	assert.Equal(t, worktree.ReasonWorktreeNotFound, r, "no repository configured")
	require.NoError(t, none.ReleaseWorktree(t.Context(), ReleaseWorktreeInput{AgentID: "coder", RepoID: "app", WorktreeID: "w1"}))
}

// TestRecordWorktree: the projection is written and the transition audited; the recovery
// timeout is audited for operators.
func TestRecordWorktree(t *testing.T) {
	st := memory.New()
	a := &Activities{Store: st, Sink: audit.New(nil, st.Audit())}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	b := store.WorktreeBinding{AgentID: "coder", State: "BOUND_HOME", RepoID: "app", HomeWorktreeID: "w1", WorktreeID: "w1",
		Branch: "sw4rm/w1", Path: "/p", UpdatedAt: at}
	require.NoError(t, a.RecordWorktree(t.Context(), RecordWorktreeInput{Binding: b, From: "UNBOUND", Event: "bind_ok", Actor: "coder"}))
	got, err := st.Worktrees().GetBinding(t.Context(), "coder")
	require.NoError(t, err)
	assert.Equal(t, b, got)
	require.NoError(t, a.NotifyBindRecoveryTimeout(t.Context(), BindRecoveryTimeoutInput{AgentID: "coder", RepoID: "app", WorktreeID: "w1",
		Reason: "worktree_not_found", Note: "gone", FailedAt: at, Attempts: 4}))

	evs, err := st.Audit().List(t.Context(), store.AuditFilter{CorrelationID: WorktreeCorrelation("coder")})
	require.NoError(t, err)
	require.Len(t, evs, 2)
	assert.Equal(t, WorktreeEventState, evs[0].Type)
	assert.Equal(t, "coder", evs[0].Actor)
	var d map[string]any
	require.NoError(t, json.Unmarshal(evs[0].Details, &d))
	assert.Equal(t, "UNBOUND", d["from"])
	assert.Equal(t, "bind_ok", d["event"])
	assert.Equal(t, "BOUND_HOME", d["state"])
	assert.Equal(t, WorktreeEventRecoveryTimeout, evs[1].Type)
	require.NoError(t, json.Unmarshal(evs[1].Details, &d))
	assert.Equal(t, "worktree_not_found", d["reason"])
	assert.EqualValues(t, 4, d["attempts"])
}
