// Package repos holds the git repositories agents work in, registered by configuration
// (SW4RM_REPOS: repo_id → path of a git repository), and makes, locks and releases the git
// worktrees agents are bound to (§16). It runs the real git CLI. Every failure it returns is
// a *worktree.BindError whose reason is one of §16.3's (worktree_not_found,
// permission_denied, filesystem_error, worktree_locked), classified from git's own errors.
//
// Layout (docs/worktrees.md, "Configuration"): the worktree (repo_id, worktree_id) is the
// directory <root>/<repo_id>/<worktree_id> when a root is configured (SW4RM_WORKTREE_ROOT),
// else <repo>/.sw4rm-worktrees/<worktree_id>; its branch is sw4rm/<worktree_id>. A home
// worktree is locked (git worktree lock) while its agent is bound, with a reason that names
// the agent, so a second agent binding it learns it is taken and git refuses to prune or
// move it.
package repos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sw4rm/sw4rm-temporal/confine"
	"github.com/sw4rm/sw4rm-temporal/protocol/worktree"
)

// DefaultDirName is the directory, inside a repository, that holds its worktrees when no
// root is configured.
const DefaultDirName = ".sw4rm-worktrees"

// BranchPrefix prefixes the branch of every worktree: sw4rm/<worktree_id> never collides
// with a person's branches.
const BranchPrefix = "sw4rm/"

// lockReasonPrefix starts the reason of every lock this package takes.
const lockReasonPrefix = "sw4rm: bound by agent "

// Branch is the branch of worktree worktreeID: sw4rm/<worktree_id>.
func Branch(worktreeID string) string { return BranchPrefix + worktreeID }

// LockReason is the reason of the git worktree lock that agent holds on its home worktree
// ("sw4rm: bound by agent <agent_id>"): what tells a worktree that is ours from one locked by
// another agent or by a person.
func LockReason(agent string) string { return lockReasonPrefix + agent }

// Parse reads SW4RM_REPOS: comma-separated repo_id=path pairs, e.g.
// "app=/srv/git/app,docs=/srv/git/docs". Each repo_id must be a valid one
// (worktree.ValidateRepoID) and appear once; each path must be absolute. Empty means no
// repository. Whether each path is a git repository is checked by New.
func Parse(spec string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(spec, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, path, ok := strings.Cut(part, "=")
		id, path = strings.TrimSpace(id), strings.TrimSpace(path)
		if !ok || path == "" {
			return nil, fmt.Errorf("%q: want repo_id=/path/to/repository pairs separated by commas", part)
		}
		if perr := worktree.ValidateRepoID(id); perr != nil {
			return nil, fmt.Errorf("%q: %s", part, perr.Msg)
		}
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("%q: the path must be absolute", part)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("repo_id %q is given twice", id)
		}
		out[id] = filepath.Clean(path)
	}
	return out, nil
}

// Manager makes and releases the worktrees of the configured repositories. Its methods are
// safe for concurrent use: git operations on one repository are serialized inside the
// process (git's own lock files would otherwise make concurrent `git worktree add`s fail),
// and contention with other processes on git's lock files is retried.
type Manager struct {
	repos map[string]string // repo_id → repository directory, symbolic links resolved
	root  string            // configured root, symbolic links resolved; "" for the default
	git   string            // the git executable

	mu    sync.Mutex
	locks map[string]*sync.Mutex // per repository directory
}

// New checks the repositories and returns their manager: git must be installed when any is
// configured, and each path must be a git repository (bare or not). root, when not empty, is
// where worktrees are made (created if missing); it must be absolute.
func New(ctx context.Context, repos map[string]string, root string) (*Manager, error) {
	m := &Manager{repos: map[string]string{}, locks: map[string]*sync.Mutex{}}
	if root != "" {
		if !filepath.IsAbs(root) {
			return nil, fmt.Errorf("worktree root %q must be an absolute path", root)
		}
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, fmt.Errorf("worktree root: %w", err)
		}
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			return nil, fmt.Errorf("worktree root: %w", err)
		}
		m.root = real
	}
	if len(repos) == 0 {
		return m, nil
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("repositories are configured but the git CLI is not installed (%w); install git", err)
	}
	m.git = git
	// Sorted, so the first bad repository reported is the same every time.
	ids := make([]string, 0, len(repos))
	for id := range repos {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		real, err := filepath.EvalSymlinks(repos[id])
		if err != nil {
			return nil, fmt.Errorf("repository %s: %w", id, err)
		}
		if _, err := m.run(ctx, real, "rev-parse", "--git-dir"); err != nil {
			return nil, fmt.Errorf("repository %s at %s is not a git repository: %w", id, real, err)
		}
		m.repos[id] = real
	}
	return m, nil
}

// RepoIDs returns the configured repo_ids, sorted.
func (m *Manager) RepoIDs() []string {
	if m == nil {
		return nil
	}
	ids := make([]string, 0, len(m.repos))
	for id := range m.repos {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Worktree is a worktree made or found by Ensure.
type Worktree struct {
	// RepoID and WorktreeID name it (§16).
	RepoID, WorktreeID string
	// Branch is its branch, sw4rm/<worktree_id>.
	Branch string
	// Path is its directory.
	Path string
	// Created is true when this call made it; false when it existed and was reused.
	Created bool
	// Locked is true when it is locked by the agent Ensure was called for.
	Locked bool
}

// EnsureRequest asks Ensure for one worktree.
type EnsureRequest struct {
	// RepoID and WorktreeID name the worktree.
	RepoID, WorktreeID string
	// Agent is the agent it is for.
	Agent string
	// Lock locks it for Agent (a home binding). A worktree locked by anyone else is then
	// refused with worktree_locked; without Lock (a non-home binding, §16.2) its lock is left
	// as it is, since the switch's approval is what lets the agent in.
	Lock bool
}

// Ensure makes the worktree, or reuses it when it exists and is sw4rm's (registered with the
// repository, on branch sw4rm/<worktree_id>), and with Lock locks it for the agent. It is
// idempotent: calling it again for the same agent finds the worktree made and locked and
// changes nothing. Failures are *worktree.BindError with §16.3's reasons.
func (m *Manager) Ensure(ctx context.Context, req EnsureRequest) (Worktree, error) {
	if err := validate(req.RepoID, req.WorktreeID); err != nil {
		return Worktree{}, err
	}
	repo, err := m.repo(req.RepoID)
	if err != nil {
		return Worktree{}, err
	}
	unlock := m.lockRepo(repo)
	defer unlock()
	if _, err := os.Stat(repo); err != nil {
		return Worktree{}, fsError(err, "repository %s at %s", req.RepoID, repo)
	}
	path, err := m.path(ctx, repo, req.RepoID, req.WorktreeID)
	if err != nil {
		return Worktree{}, err
	}
	wt := Worktree{RepoID: req.RepoID, WorktreeID: req.WorktreeID, Branch: Branch(req.WorktreeID), Path: path}
	list, err := m.list(ctx, repo)
	if err != nil {
		return Worktree{}, err
	}
	entry, found := find(list, path)
	if found && (entry.prunable || missing(path)) {
		// Registered, but its directory is gone: forget it and make it again — unless another
		// holds its lock (git does not call a locked worktree prunable).
		if entry.locked && entry.reason != LockReason(req.Agent) {
			return Worktree{}, lockedBy(req.RepoID, req.WorktreeID, entry.reason)
		}
		if entry.locked {
			if _, err := m.mutate(ctx, repo, "worktree", "unlock", path); err != nil {
				return Worktree{}, err
			}
		}
		if _, err := m.mutate(ctx, repo, "worktree", "prune"); err != nil {
			return Worktree{}, err
		}
		found = false
	}
	if !found {
		return m.add(ctx, repo, wt, req)
	}
	if entry.branch != "refs/heads/"+wt.Branch {
		return Worktree{}, worktree.BindErrorf(worktree.ReasonPermissionDenied,
			"%s is a worktree of repository %s on %s, not on %s: it is not sw4rm's and is not reused", path, req.RepoID, describeHead(entry), wt.Branch)
	}
	if err := m.checkHead(ctx, path, wt.Branch); err != nil {
		return Worktree{}, err
	}
	if !req.Lock {
		return wt, nil
	}
	switch {
	case entry.locked && entry.reason == LockReason(req.Agent):
		wt.Locked = true
		return wt, nil
	case entry.locked:
		return Worktree{}, lockedBy(req.RepoID, req.WorktreeID, entry.reason)
	}
	if _, err := m.mutate(ctx, repo, "worktree", "lock", "--reason", LockReason(req.Agent), path); err != nil {
		return Worktree{}, err
	}
	wt.Locked = true
	return wt, nil
}

// Release unlocks the worktree if agent holds its lock (the end of a home binding). The
// directory and the branch stay, with whatever the agent left in them: removing a worktree is
// an operator's decision (`git worktree remove`). A worktree that is gone, unlocked or locked
// by someone else is left as it is, so Release is idempotent.
func (m *Manager) Release(ctx context.Context, repoID, worktreeID, agent string) error {
	if err := validate(repoID, worktreeID); err != nil {
		return err
	}
	repo, err := m.repo(repoID)
	if err != nil {
		return nil // nothing configured under that id holds a lock of ours
	}
	unlock := m.lockRepo(repo)
	defer unlock()
	if _, err := os.Stat(repo); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	path, err := m.path(ctx, repo, repoID, worktreeID)
	if err != nil {
		return err
	}
	list, err := m.list(ctx, repo)
	if err != nil {
		return err
	}
	entry, found := find(list, path)
	if !found || !entry.locked || entry.reason != LockReason(agent) {
		return nil
	}
	_, err = m.mutate(ctx, repo, "worktree", "unlock", path)
	return err
}

// Path is the directory of worktree (repoID, worktreeID), whether or not it exists.
func (m *Manager) Path(ctx context.Context, repoID, worktreeID string) (string, error) {
	if err := validate(repoID, worktreeID); err != nil {
		return "", err
	}
	repo, err := m.repo(repoID)
	if err != nil {
		return "", err
	}
	return m.dir(repo, repoID, worktreeID), nil
}

func validate(repoID, worktreeID string) error {
	if perr := worktree.ValidateRepoID(repoID); perr != nil {
		return worktree.BindErrorf(worktree.ReasonWorktreeNotFound, "%s", perr.Msg)
	}
	if perr := worktree.ValidateWorktreeID(worktreeID); perr != nil {
		return worktree.BindErrorf(worktree.ReasonWorktreeNotFound, "%s", perr.Msg)
	}
	return nil
}

// repo is the directory of a configured repository.
func (m *Manager) repo(id string) (string, error) {
	if m == nil || len(m.repos) == 0 {
		return "", worktree.BindErrorf(worktree.ReasonWorktreeNotFound, "repository %s is not configured: no repository is (SW4RM_REPOS)", id)
	}
	dir, ok := m.repos[id]
	if !ok {
		return "", worktree.BindErrorf(worktree.ReasonWorktreeNotFound, "repository %s is not configured (SW4RM_REPOS has %s)", id, strings.Join(m.RepoIDs(), ", "))
	}
	return dir, nil
}

// lockRepo serializes git operations on one repository inside the process and returns the
// unlock.
func (m *Manager) lockRepo(repo string) func() {
	m.mu.Lock()
	l, ok := m.locks[repo]
	if !ok {
		l = &sync.Mutex{}
		m.locks[repo] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// dir is where worktree (repoID, worktreeID) of the repository at repo lives.
func (m *Manager) dir(repo, repoID, worktreeID string) string {
	if m.root != "" {
		return filepath.Join(m.root, repoID, worktreeID)
	}
	return filepath.Join(repo, DefaultDirName, worktreeID)
}

// path is dir with the parent's symbolic links resolved, as git records worktree paths; the
// parent is created, and with the default layout the repository is told to ignore it.
func (m *Manager) path(ctx context.Context, repo, repoID, worktreeID string) (string, error) {
	p := m.dir(repo, repoID, worktreeID)
	parent := filepath.Dir(p)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fsError(err, "worktree directory %s", parent)
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return "", fsError(err, "worktree directory %s", parent)
	}
	if m.root == "" {
		if err := m.exclude(ctx, repo); err != nil {
			return "", err
		}
	}
	return filepath.Join(real, worktreeID), nil
}

// excludeLine keeps the default worktree directory out of the main checkout's `git status`.
const excludeLine = "/" + DefaultDirName + "/"

// exclude adds excludeLine to the repository's info/exclude unless it is there.
func (m *Manager) exclude(ctx context.Context, repo string) error {
	common, err := m.run(ctx, repo, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return err
	}
	file := filepath.Join(strings.TrimSpace(common), "info", "exclude")
	b, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fsError(err, "%s", file)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.TrimSpace(line) == excludeLine {
			return nil
		}
	}
	if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	b = append(b, excludeLine+"\n"...)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fsError(err, "%s", file)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return fsError(err, "%s", file)
	}
	return nil
}

// add makes a worktree that git does not know: on its branch if the branch exists, else on a
// new branch from the repository's HEAD; locked for the agent in the same command when asked.
func (m *Manager) add(ctx context.Context, repo string, wt Worktree, req EnsureRequest) (Worktree, error) {
	if _, err := os.Lstat(wt.Path); err == nil {
		return Worktree{}, worktree.BindErrorf(worktree.ReasonFilesystemError,
			"%s exists and is not a worktree of repository %s: move it away or register it", wt.Path, req.RepoID)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Worktree{}, fsError(err, "%s", wt.Path)
	}
	// The arguments are made anew each attempt: a failed `worktree add -b` may have created
	// its branch before it failed, and the retry must then check it out.
	err := racing(ctx, "git worktree add", func() error {
		args := []string{"worktree", "add"}
		if req.Lock {
			args = append(args, "--lock", "--reason", LockReason(req.Agent))
		}
		if _, err := m.run(ctx, repo, "rev-parse", "--verify", "--quiet", "refs/heads/"+wt.Branch); err == nil {
			args = append(args, wt.Path, wt.Branch)
		} else {
			args = append(args, "-b", wt.Branch, wt.Path)
		}
		_, err := m.mutate(ctx, repo, args...)
		return err
	})
	if err != nil {
		return Worktree{}, err
	}
	wt.Created, wt.Locked = true, req.Lock
	return wt, nil
}

// checkHead runs git inside the worktree, confined to it (confine.Command), and checks that
// its HEAD is on branch: the worktree is usable and is the one it claims to be.
func (m *Manager) checkHead(ctx context.Context, path, branch string) error {
	root, err := confine.Open(path)
	if err != nil {
		return fsError(err, "worktree %s", path)
	}
	defer func() { _ = root.Close() }()
	cmd := confine.Command(ctx, root, m.git, "symbolic-ref", "--quiet", "HEAD")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return classify(fmt.Sprintf("git symbolic-ref HEAD in %s", path), stderr.String(), err)
	}
	if head := strings.TrimSpace(string(out)); head != "refs/heads/"+branch {
		return worktree.BindErrorf(worktree.ReasonPermissionDenied, "worktree %s is on %s, not on %s: it is not sw4rm's", path, head, branch)
	}
	return nil
}

// Contention on git's lock files (index.lock, a ref's .lock, config.lock) from another
// process is retried this many times, waiting contentionWait, doubling, in between.
const (
	contentionAttempts = 6
	contentionWait     = 50 * time.Millisecond
)

// mutate runs a git command that changes the repository, retrying it while another process
// holds one of git's lock files. A lock that stays held is worktree_locked.
func (m *Manager) mutate(ctx context.Context, repo string, args ...string) (string, error) {
	wait := contentionWait
	for attempt := 1; ; attempt++ {
		out, err := m.run(ctx, repo, args...)
		var ge *gitError
		if err == nil || !errors.As(err, &ge) || !ge.contention || attempt == contentionAttempts {
			if ge != nil && ge.contention {
				return out, worktree.BindErrorf(worktree.ReasonWorktreeLocked, "git's lock file stayed held through %d attempts: %s", attempt, ge.msg)
			}
			return out, err
		}
		select {
		case <-ctx.Done():
			return out, fsError(ctx.Err(), "git %s", args[0])
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// racing runs fn again while it fails because another process's `worktree add` was half
// done (a worktreeRace), contentionAttempts times at most, waiting contentionWait, doubling,
// in between.
func racing(ctx context.Context, what string, fn func() error) error {
	wait := contentionWait
	for attempt := 1; ; attempt++ {
		err := fn()
		var ge *gitError
		if err == nil || !errors.As(err, &ge) || !ge.worktreeRace || attempt == contentionAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return fsError(ctx.Err(), "%s", what)
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// gitError is a failed git command, classified.
type gitError struct {
	*worktree.BindError
	msg string
	// contention: git found one of its lock files held.
	contention bool
	// worktreeRace: git read another worktree's administrative files while another process
	// was still writing them (two `worktree add`s of one repository at once).
	worktreeRace bool
}

func (e *gitError) Unwrap() error { return e.BindError }

// run runs git in repo with a minimal environment and its hooks off: binding a worktree runs
// no code the repository carries (a post-checkout hook), and no credential of the server
// reaches git. Messages are in English (LC_ALL=C), which classify reads.
func (m *Manager) run(ctx context.Context, repo string, args ...string) (string, error) {
	full := append([]string{"-C", repo, "-c", "core.hooksPath=" + os.DevNull}, args...)
	cmd := exec.CommandContext(ctx, m.git, full...)
	path := os.Getenv("PATH")
	if path == "" {
		path = confine.DefaultPath
	}
	env := []string{"PATH=" + path, "LC_ALL=C", "GIT_TERMINAL_PROMPT=0"}
	if home := os.Getenv("HOME"); home != "" {
		env = append(env, "HOME="+home) // git reads the user's configuration from it
	}
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), classify("git "+strings.Join(args, " "), stderr.String(), err)
	}
	return string(out), nil
}

// classify turns a failed git command into a *gitError with §16.3's reason, from what git
// wrote on stderr (in the C locale).
func classify(what, stderr string, err error) error {
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = err.Error()
	}
	if len(msg) > 600 {
		msg = msg[:600] + "…"
	}
	low := strings.ToLower(msg)
	ge := &gitError{msg: what + ": " + msg}
	reason := worktree.ReasonFilesystemError
	var ee *exec.Error
	switch {
	case errors.As(err, &ee):
		// git itself could not be run.
	case strings.Contains(low, ".lock': file exists") || strings.Contains(low, "index.lock") ||
		strings.Contains(low, "cannot lock ref") || strings.Contains(low, "could not lock config file"):
		ge.contention = true
		reason = worktree.ReasonWorktreeLocked
	case strings.Contains(low, "failed to read ") && strings.Contains(low, "/worktrees/"):
		// Another process's `worktree add` had made its entry's directory but not yet
		// written the files in it ("failed to read .git/worktrees/w3/commondir").
		ge.worktreeRace = true
	case strings.Contains(low, "is locked") || strings.Contains(low, "already locked") ||
		strings.Contains(low, "is already checked out at") || strings.Contains(low, "is already used by worktree") ||
		strings.Contains(low, "is already registered worktree"):
		reason = worktree.ReasonWorktreeLocked
	case strings.Contains(low, "permission denied") || strings.Contains(low, "operation not permitted") ||
		strings.Contains(low, "read-only file system") || strings.Contains(low, "detected dubious ownership"):
		reason = worktree.ReasonPermissionDenied
	case strings.Contains(low, "not a git repository") || strings.Contains(low, "cannot change to") ||
		strings.Contains(low, "no such file or directory") || strings.Contains(low, "is not a working tree") ||
		strings.Contains(low, "invalid reference"):
		reason = worktree.ReasonWorktreeNotFound
	}
	ge.BindError = worktree.BindErrorf(reason, "%s", ge.msg)
	return ge
}

// fsError classifies a failed file operation of this package.
func fsError(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return worktree.BindErrorf(worktree.ReasonWorktreeNotFound, "%s: %v", what, err)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, confine.ErrPermissionDenied):
		return worktree.BindErrorf(worktree.ReasonPermissionDenied, "%s: %v", what, err)
	}
	return worktree.BindErrorf(worktree.ReasonFilesystemError, "%s: %v", what, err)
}

// lockedBy is the refusal of a worktree another holds.
func lockedBy(repoID, worktreeID, reason string) error {
	holder := "without a reason"
	if reason != "" {
		holder = fmt.Sprintf("%q", reason)
	}
	if agent, ok := strings.CutPrefix(reason, lockReasonPrefix); ok {
		holder = "by agent " + agent
	}
	return worktree.BindErrorf(worktree.ReasonWorktreeLocked, "worktree %s of repository %s is locked %s", worktreeID, repoID, holder)
}

// entry is one worktree of `git worktree list --porcelain`.
type entry struct {
	path     string
	branch   string // "refs/heads/…", or "" when detached or bare
	detached bool
	bare     bool
	locked   bool
	reason   string
	prunable bool
}

func describeHead(e entry) string {
	switch {
	case e.bare:
		return "the bare repository"
	case e.detached || e.branch == "":
		return "a detached HEAD"
	}
	return strings.TrimPrefix(e.branch, "refs/heads/")
}

// list reads the repository's worktrees.
func (m *Manager) list(ctx context.Context, repo string) ([]entry, error) {
	var out string
	err := racing(ctx, "git worktree list", func() (err error) {
		out, err = m.run(ctx, repo, "worktree", "list", "--porcelain")
		return err
	})
	if err != nil {
		return nil, err
	}
	return parseList(out), nil
}

// parseList reads `git worktree list --porcelain`: blocks separated by empty lines, one
// attribute per line.
func parseList(out string) []entry {
	var list []entry
	var cur *entry
	for line := range strings.SplitSeq(out, "\n") {
		key, val, _ := strings.Cut(line, " ")
		switch key {
		case "worktree":
			list = append(list, entry{path: val})
			cur = &list[len(list)-1]
		case "branch":
			if cur != nil {
				cur.branch = val
			}
		case "detached":
			if cur != nil {
				cur.detached = true
			}
		case "bare":
			if cur != nil {
				cur.bare = true
			}
		case "locked":
			if cur != nil {
				cur.locked, cur.reason = true, val
			}
		case "prunable":
			if cur != nil {
				cur.prunable = true
			}
		case "":
			cur = nil
		}
	}
	return list
}

// find looks a path up among the entries, comparing with symbolic links resolved where the
// path exists.
func find(list []entry, path string) (entry, bool) {
	want := canonical(path)
	for _, e := range list {
		if e.path == path || canonical(e.path) == want {
			return e, true
		}
	}
	return entry{}, false
}

// missing reports whether nothing is at path.
func missing(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

func canonical(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return filepath.Clean(p)
}
