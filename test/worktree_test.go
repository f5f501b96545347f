package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/confine"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/worktreepb"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// gitIn runs git in dir and fails the test if it fails.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@example.com", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return string(out)
}

// gitRepo makes a git repository with one commit in the test's temporary directory.
func gitRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("worktree tests need git (.ci/run installs it)")
		}
		t.Skip("git is not installed")
	}
	dir := filepath.Join(t.TempDir(), "app")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	gitIn(t, dir, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# app\n"), 0o644))
	gitIn(t, dir, "add", "README.md")
	gitIn(t, dir, "commit", "-q", "-m", "first")
	return dir
}

// worktreeSystem starts sw4rm with one repository, "app", configured.
func worktreeSystem(t *testing.T, kind string) (*system, string) {
	t.Helper()
	repo := gitRepo(t)
	cfg := newConfig(t, kind)
	cfg.Repos = "app=" + repo
	return start(t, cfg), repo
}

// binder is a registered agent with its worktree client.
type binder struct {
	*sdk.Agent
	wt *wtsdk.Client
}

func dialBinder(t *testing.T, sys *system, name string) *binder {
	t.Helper()
	a, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, name))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.NoError(t, a.Register(context.Background(), &registrypb.AgentDescriptor{
		Name: name, Description: "worktree test agent " + name, CommunicationClass: commonpb.CommunicationClass_STANDARD,
	}))
	return &binder{Agent: a, wt: wtsdk.New(a)}
}

// lockOfWorktree is the reason of path's lock in `git worktree list --porcelain`; ok is
// false when it is not locked.
func lockOfWorktree(t *testing.T, repo, path string) (reason string, ok bool) {
	t.Helper()
	real, err := filepath.EvalSymlinks(path)
	require.NoError(t, err)
	var cur string
	for line := range strings.SplitSeq(gitIn(t, repo, "worktree", "list", "--porcelain"), "\n") {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "worktree":
			cur = val
		case "locked":
			if cur == real {
				return val, true
			}
		}
	}
	return "", false
}

// auditTypes lists the types of an agent's binding audit events, in order.
func auditTypes(t *testing.T, sys *system, agent string) []string {
	t.Helper()
	evs, err := sys.app.Store().Audit().List(context.Background(), store.AuditFilter{CorrelationID: activities.WorktreeCorrelation(agent)})
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// TestWorktreeBindWorkUnbind: on both stores, an agent binds its home worktree (made on
// sw4rm/<id> and locked for it), writes a file there through confine, and unbinds (the lock
// is released, the work stays); another agent cannot bind the worktree while it is held; bad
// names are refused; several agents binding worktrees of one repository at once all succeed.
func TestWorktreeBindWorkUnbind(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, repo := worktreeSystem(t, kind)
			ctx := context.Background()
			coder := dialBinder(t, sys, "coder")

			st, err := coder.wt.Bind(ctx, "app", "feature-1")
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateBoundHome, st.State)
			assert.Equal(t, "sw4rm/feature-1", st.Branch)
			assert.Equal(t, "feature-1", st.WorktreeID)
			realRepo, err := filepath.EvalSymlinks(repo)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(realRepo, repos.DefaultDirName, "feature-1"), st.Path)
			again, err := coder.wt.Bind(ctx, "app", "feature-1")
			require.NoError(t, err, "binding again is answered ok")
			assert.Equal(t, st.Path, again.Path)

			path, err := coder.wt.Path(ctx)
			require.NoError(t, err)
			assert.Equal(t, st.Path, path)
			reason, locked := lockOfWorktree(t, repo, path)
			assert.True(t, locked, "locked while bound")
			assert.Equal(t, repos.LockReason(coder.ID()), reason)
			assert.Equal(t, "sw4rm/feature-1", strings.TrimSpace(gitIn(t, path, "rev-parse", "--abbrev-ref", "HEAD")))

			// The agent works in the worktree through confine, which keeps it there.
			root, err := confine.Open(path)
			require.NoError(t, err)
			require.NoError(t, root.MkdirAll("notes", 0o755))
			require.NoError(t, root.WriteFile("notes/hello.txt", []byte("hello from "+coder.ID()), 0o644))
			assert.ErrorIs(t, root.WriteFile(".git", []byte("x"), 0o644), confine.ErrPermissionDenied)
			assert.ErrorIs(t, root.WriteFile("../../README.md", []byte("x"), 0o644), confine.ErrPermissionDenied)
			require.NoError(t, root.Close())
			assert.Contains(t, gitIn(t, path, "status", "--porcelain"), "notes/", "git sees the work in the worktree")
			assert.Empty(t, strings.TrimSpace(gitIn(t, repo, "status", "--porcelain")), "the main checkout is untouched")

			// The worktree is the coder's while it is bound.
			other := dialBinder(t, sys, "other")
			_, err = other.wt.Bind(ctx, "app", "feature-1")
			var be *wtsdk.BindError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, "worktree_locked", be.Reason)
			assert.Contains(t, be.Message, "locked by agent "+coder.ID())
			op := wtsdk.NewOperator(coder.Conn())
			require.NoError(t, op.Unbind(ctx, other.ID()), "an operator clears the failed bind")

			// Bad input is refused with validation_error before anything runs.
			raw := worktreepb.NewWorktreeServiceClient(coder.Conn())
			for _, req := range []*worktreepb.BindRequest{
				{AgentId: coder.ID(), RepoId: "app", WorktreeId: "../escape"},
				{AgentId: coder.ID(), RepoId: "app", WorktreeId: "a b"},
				{AgentId: coder.ID(), RepoId: "app/x", WorktreeId: "w"},
				{AgentId: coder.ID(), RepoId: "app"},
			} {
				_, err := raw.Bind(ctx, req)
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v: %v", req, err)
				assert.True(t, strings.HasPrefix(status.Convert(err).Message(), "validation_error: "), "%v", err)
			}
			_, err = raw.Bind(ctx, &worktreepb.BindRequest{AgentId: uniq(t, "ghost"), RepoId: "app", WorktreeId: "w"})
			assert.Equal(t, codes.NotFound, status.Code(err), "an unregistered agent: %v", err)
			_, err = raw.ApproveSwitch(ctx, &worktreepb.SwitchApprove{AgentId: coder.ID()})
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "no switch is pending: %v", err)

			require.NoError(t, coder.wt.Unbind(ctx))
			st, err = coder.wt.Status(ctx)
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateUnbound, st.State)
			_, err = coder.wt.Path(ctx)
			assert.ErrorIs(t, err, wtsdk.ErrNotBound)
			_, locked = lockOfWorktree(t, repo, path)
			assert.False(t, locked, "released")
			b, err := os.ReadFile(filepath.Join(path, "notes", "hello.txt"))
			require.NoError(t, err, "the work stays")
			assert.Equal(t, "hello from "+coder.ID(), string(b))
			require.NoError(t, coder.wt.Unbind(ctx), "unbinding an unbound agent is ok")
			rec, err := sys.app.Store().Worktrees().GetBinding(ctx, coder.ID())
			require.NoError(t, err)
			assert.Equal(t, "UNBOUND", rec.State)
			require.Eventually(t, func() bool {
				return slices.Equal(auditTypes(t, sys, coder.ID()), []string{activities.WorktreeEventState, activities.WorktreeEventState})
			}, 5*time.Second, 20*time.Millisecond, "bind_ok and unbind are audited: %v", auditTypes(t, sys, coder.ID()))

			// Now other may take it, and four agents bind worktrees of the repository at once.
			st, err = other.wt.Bind(ctx, "app", "feature-1")
			require.NoError(t, err)
			assert.Equal(t, path, st.Path)
			var wg sync.WaitGroup
			errs := make([]error, 4)
			agents := make([]*binder, 4)
			for i := range agents {
				agents[i] = dialBinder(t, sys, fmt.Sprintf("par%d", i))
			}
			for i, a := range agents {
				wg.Go(func() { _, errs[i] = a.wt.Bind(ctx, "app", fmt.Sprintf("par-%d", i)) })
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "agent %d", i)
				p, err := agents[i].wt.Path(ctx)
				require.NoError(t, err)
				reason, locked := lockOfWorktree(t, repo, p)
				assert.True(t, locked)
				assert.Equal(t, repos.LockReason(agents[i].ID()), reason)
			}
		})
	}
}

// TestWorktreeBindFailureRetries: on both stores, a bind to a repository that is not
// configured answers ok=false with worktree_not_found, enters BIND_FAILED, is retried three
// times with backoff and stays BIND_FAILED with its reason; each failure is audited; an
// operator's unbind clears it.
func TestWorktreeBindFailureRetries(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, _ := worktreeSystem(t, kind)
			ctx := context.Background()
			coder := dialBinder(t, sys, "coder")

			st, err := coder.wt.Bind(ctx, "missing", "w1")
			var be *wtsdk.BindError
			require.ErrorAs(t, err, &be)
			assert.Equal(t, "worktree_not_found", be.Reason)
			assert.Contains(t, be.Message, "repository missing is not configured")
			assert.Contains(t, be.Message, "retry 1 of 3")
			assert.Equal(t, wtsdk.StateBindFailed, st.State)

			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			st, err = coder.wt.WaitState(wctx, 100*time.Millisecond, func(s wtsdk.Status) bool { return s.Retries == 3 })
			require.NoError(t, err, "the three retries run (1 s, 2 s, 4 s): %+v", st)
			assert.Equal(t, wtsdk.StateBindFailed, st.State)
			assert.Equal(t, "worktree_not_found", st.Reason)
			assert.Equal(t, 4, st.Attempts)
			assert.Equal(t, "missing", st.RepoID)

			rec, err := sys.app.Store().Worktrees().GetBinding(ctx, coder.ID())
			require.NoError(t, err)
			assert.Equal(t, "BIND_FAILED", rec.State)
			assert.Equal(t, "worktree_not_found", rec.Reason)
			require.Eventually(t, func() bool {
				return slices.Equal(auditTypes(t, sys, coder.ID()), []string{activities.WorktreeEventState, activities.WorktreeEventBindFailed,
					activities.WorktreeEventBindFailed, activities.WorktreeEventBindFailed})
			}, 5*time.Second, 20*time.Millisecond, "the failure and each failed retry: %v", auditTypes(t, sys, coder.ID()))

			list, err := sys.app.Store().Worktrees().ListBindings(ctx, store.WorktreeFilter{State: "BIND_FAILED"})
			require.NoError(t, err)
			require.Len(t, list, 1)
			assert.Equal(t, coder.ID(), list[0].AgentID)

			require.NoError(t, wtsdk.NewOperator(coder.Conn()).Unbind(ctx, coder.ID()))
			st, err = coder.wt.Status(ctx)
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateUnbound, st.State)

			// A bind right after the unbind reaches a new run and succeeds.
			st, err = coder.wt.Bind(ctx, "app", "w1")
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateBoundHome, st.State)
			assert.Equal(t, "app", st.RepoID)
		})
	}
}

// TestWorktreeSwitches: on both stores, a switch approved by an operator binds the target
// worktree for its TTL and the TTL returns the agent home; a rejected switch leaves it home;
// an approved one revoked returns it home at once. The approved-and-returned binding's
// history is recorded for the replay test.
func TestWorktreeSwitches(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys, repo := worktreeSystem(t, kind)
			ctx := context.Background()
			coder := dialBinder(t, sys, "coder")
			op := wtsdk.NewOperator(coder.Conn())
			home, err := coder.wt.Bind(ctx, "app", "home")
			require.NoError(t, err)

			// Approved by an operator, returned home by the TTL.
			st, err := coder.wt.RequestSwitch(ctx, "hotfix", false)
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateSwitchPending, st.State)
			assert.Equal(t, "home", st.WorktreeID, "still home while pending")
			assert.Equal(t, "hotfix", st.Target)
			err = coder.wt.Unbind(ctx)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "no unbind while a switch is pending (§16.2): %v", err)
			_, err = op.ApproveSwitch(ctx, coder.ID(), "elsewhere", time.Second)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "another target: %v", err)

			st, err = op.ApproveSwitch(ctx, coder.ID(), "hotfix", 3*time.Second)
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateBoundNonHome, st.State)
			assert.Equal(t, "hotfix", st.WorktreeID)
			assert.Equal(t, "sw4rm/hotfix", st.Branch)
			assert.Equal(t, "home", st.Home)
			assert.Positive(t, st.TTLRemaining)
			assert.LessOrEqual(t, st.TTLRemaining, 3*time.Second)
			away, err := coder.wt.Path(ctx)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(filepath.Dir(home.Path), "hotfix"), away)
			assert.DirExists(t, away)
			_, locked := lockOfWorktree(t, repo, away)
			assert.False(t, locked, "a non-home worktree is not locked for the visitor")

			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			st, err = coder.wt.WaitState(wctx, 100*time.Millisecond, func(s wtsdk.Status) bool { return s.State == wtsdk.StateBoundHome })
			require.NoError(t, err, "the TTL returns it home")
			assert.Equal(t, "home", st.WorktreeID)
			assert.Equal(t, home.Path, st.Path)
			assert.Contains(t, st.Note, "TTL")

			// Rejected: it stays home.
			_, err = coder.wt.RequestSwitch(ctx, "hotfix", false)
			require.NoError(t, err)
			st, err = op.RejectSwitch(ctx, coder.ID(), "not now")
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateBoundHome, st.State)
			assert.Equal(t, "home", st.WorktreeID)
			assert.Contains(t, st.Note, "not now")

			// Approved, then revoked: home at once, long before the TTL.
			_, err = coder.wt.RequestSwitch(ctx, "hotfix", false)
			require.NoError(t, err)
			_, err = op.ApproveSwitch(ctx, coder.ID(), "", time.Hour)
			require.NoError(t, err)
			st, err = op.RejectSwitch(ctx, coder.ID(), "revoked")
			require.NoError(t, err)
			assert.Equal(t, wtsdk.StateBoundHome, st.State)
			assert.Contains(t, st.Note, "revoked")

			require.NoError(t, coder.wt.Unbind(ctx))
			var events []string
			require.Eventually(t, func() bool {
				evs, err := sys.app.Store().Audit().List(ctx, store.AuditFilter{CorrelationID: activities.WorktreeCorrelation(coder.ID())})
				require.NoError(t, err)
				events = events[:0]
				for _, e := range evs {
					var d map[string]any
					require.NoError(t, json.Unmarshal(e.Details, &d))
					events = append(events, fmt.Sprint(d["event"]))
				}
				return len(events) >= 10
			}, 5*time.Second, 20*time.Millisecond)
			assert.Equal(t, []string{"bind_ok", "switch_request", "switch_approve", "ttl_expired", "switch_request", "switch_reject",
				"switch_request", "switch_approve", "switch_revoke", "unbind"}, events, "every transition is audited (§16)")
			recordHistory(t, sys.app.Temporal(), workflows.WorktreeWorkflowID(coder.ID()), "worktree_switches_"+kind)
		})
	}
}
