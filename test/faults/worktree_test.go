package faults

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/repos"
	wtsdk "github.com/sw4rm/sw4rm-temporal/sdk/worktree"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// TestWorkerKilledDuringSwitchTTL: one `sw4rm server` and two `sw4rm worker`s share
// PostgreSQL, Temporal and a git repository (SW4RM_REPOS). An agent binds its home worktree,
// asks to switch to another, and an operator approves the switch for a few seconds. Before
// the TTL runs out, the worker that runs the binding's workflow tasks (named by the identity
// of its latest workflow task) is killed with SIGKILL. When the TTL fires, the worker that is
// left returns the agent home (§16.2 "TTL expired", a durable timer): Status shows
// BOUND_HOME on the home worktree, not before the TTL; the home worktree is still locked for
// the agent and the switch's target is not; and an unbind afterwards, also on the surviving
// worker, releases the home lock.
func TestWorkerKilledDuringSwitchTTL(t *testing.T) {
	repo := faultRepo(t)
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	cfg := sw4rmConfig{temporal: ts.addr, database: pg.URL(), extra: []string{"SW4RM_REPOS=app=" + repo}}
	server := startSW4RM(t, dir, "server", "server", cfg)
	workers := []*sw4rmProc{
		startSW4RM(t, dir, "worker", "worker-1", cfg),
		startSW4RM(t, dir, "worker", "worker-2", cfg),
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := dialAgent(t, server.addr, agentID("coder"))
	register(t, a, "coder")
	wt := wtsdk.New(a)
	op := wtsdk.NewOperator(a.Conn())

	home, err := wt.Bind(ctx, "app", "home")
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	if _, err := wt.RequestSwitch(ctx, "hotfix", false); err != nil {
		t.Fatalf("RequestSwitch: %v", err)
	}
	const ttl = 4 * time.Second
	away, err := op.ApproveSwitch(ctx, a.ID(), "hotfix", ttl)
	if err != nil {
		t.Fatalf("ApproveSwitch: %v", err)
	}
	approvedAt := time.Now()
	if away.State != wtsdk.StateBoundNonHome || away.WorktreeID != "hotfix" {
		t.Fatalf("after the approval: %+v", away)
	}
	victim := dagRunWorker(ctx, t, ts, workflows.WorktreeWorkflowID(a.ID()), workers)
	victim.kill()
	killedAt := time.Now()

	f := figures{scenario: "worker-kill-switch-ttl", accepted: 1}
	if killedAt.Sub(approvedAt) >= ttl {
		f.problem("the worker was killed %s after the approval, not before the TTL of %s", killedAt.Sub(approvedAt), ttl)
	}
	var still wtsdk.Status
	still, err = wt.Status(ctx)
	switch {
	case err != nil:
		f.problem("Status right after the kill: %v", err)
	case still.State != wtsdk.StateBoundNonHome && time.Since(approvedAt) < ttl:
		f.problem("right after the kill, before the TTL, the binding is %s, not BOUND_NON_HOME", still.State)
	}

	back, err := wt.WaitState(ctx, 100*time.Millisecond, func(s wtsdk.Status) bool { return s.State == wtsdk.StateBoundHome })
	returnedAt := time.Now()
	switch {
	case err != nil:
		f.problem("the agent did not return home within 2 minutes: %v (last %+v)", err, back)
	case back.WorktreeID != "home" || back.Path != home.Path || back.Branch != "sw4rm/home":
		f.problem("returned to %s at %s on %s, not home %s", back.WorktreeID, back.Path, back.Branch, home.Path)
	case !strings.Contains(back.Note, "TTL"):
		f.problem("the return's note does not name the TTL: %q", back.Note)
	case returnedAt.Sub(approvedAt) < ttl:
		f.problem("returned home %s after the approval, before the TTL of %s", returnedAt.Sub(approvedAt), ttl)
	}
	survivor := dagRunWorker(ctx, t, ts, workflows.WorktreeWorkflowID(a.ID()), workers)
	if survivor == victim {
		f.problem("the latest workflow task of the binding ran on the killed worker %s", victim.name)
	}
	if reason, locked := worktreeLock(t, repo, home.Path); !locked || reason != repos.LockReason(a.ID()) {
		f.problem("the home worktree's lock is %q (locked=%v), want the agent's", reason, locked)
	}
	if _, locked := worktreeLock(t, repo, away.Path); locked {
		f.problem("the switch's target %s is locked", away.Path)
	}

	// The surviving worker runs the binding on: an unbind releases the home lock.
	if err := wt.Unbind(ctx); err != nil {
		f.problem("Unbind after the recovery: %v", err)
	} else if _, locked := worktreeLock(t, repo, home.Path); locked {
		f.problem("the home worktree is still locked after the unbind")
	}
	f.add("ttl_s=%.0f killed=%s returned_by=%s killed_after_s=%.1f returned_after_s=%.1f", ttl.Seconds(), victim.name, survivor.name,
		killedAt.Sub(approvedAt).Seconds(), returnedAt.Sub(approvedAt).Seconds())
	f.report(t)
}

// faultRepo makes a git repository with one commit for the workers to bind worktrees in.
func faultRepo(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("the worktree fault needs git (.ci/run installs it)")
		}
		t.Skip("git is not installed")
	}
	repo := filepath.Join(t.TempDir(), "app")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("# app\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "add", "README.md")
	git(t, repo, "commit", "-q", "-m", "first")
	return repo
}

// git runs git in dir and fails the test if it fails.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=faults", "GIT_AUTHOR_EMAIL=faults@example.com", "GIT_COMMITTER_NAME=faults",
		"GIT_COMMITTER_EMAIL=faults@example.com", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// worktreeLock is the reason path is locked with, from `git worktree list --porcelain`;
// locked is false when it is not.
func worktreeLock(t *testing.T, repo, path string) (reason string, locked bool) {
	t.Helper()
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatalf("worktree %s: %v", path, err)
	}
	var cur string
	for line := range strings.SplitSeq(git(t, repo, "worktree", "list", "--porcelain"), "\n") {
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
