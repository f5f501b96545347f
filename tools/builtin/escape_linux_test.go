//go:build linux

package builtin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// The escape suite: attempts from inside a confined process to reach past its worktree,
// each refused with its §18.3 code, and each with a legitimate twin of the same shape that
// must still work, so that no refusal is an accident of shape.
//
// The framework is for every _test.go file of this package: build an escapeEnv
// (newEscapeEnv), list escapeAttempts, and hand them to runEscapeSuite with a group name,
// which runs each attempt and its twin as subtests and logs the group's figure,
// "escape suite (<group>): N attempts, N refused, N twins passed". Every group adds to one
// count (escapeTotal), which TestMain prints once the package's tests are over.

// escapeAttempt is one attempt and its twin.
type escapeAttempt struct {
	// name says what is attempted.
	name string
	// attempt runs the attempt and returns the call's error.
	attempt func(t *testing.T) error
	// want is the code the attempt must be refused with.
	want tool.Code
	// msg, if set, must be in the attempt's error: for a refusal whose code alone does not
	// say it was refused (TOOL_FAILED for "No such process").
	msg string
	// twin runs the legitimate twin, which must succeed.
	twin func(t *testing.T) error
}

// runEscapeSuite runs the attempts of a group and logs its figure.
func runEscapeSuite(t *testing.T, group string, attempts []escapeAttempt) {
	t.Helper()
	var refused, twins int
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			err := a.attempt(t)
			if got := tool.CodeOf(err); err == nil || got != a.want || !strings.Contains(err.Error(), a.msg) {
				t.Errorf("attempt: error = %v, want code %s containing %q", err, a.want, a.msg)
			} else {
				refused++
			}
			if err := a.twin(t); err != nil {
				t.Errorf("twin: %v", err)
			} else {
				twins++
			}
		})
	}
	t.Logf("escape suite (%s): %d attempts, %d refused, %d twins passed", group, len(attempts), refused, twins)
	escapeTotal.add(len(attempts), refused, twins)
	if refused != len(attempts) || twins != len(attempts) {
		t.Errorf("escape suite (%s): %d of %d refused, %d twins passed", group, refused, len(attempts), twins)
	}
}

// escapeCount is the package's escape figure, the sum of the groups that ran.
type escapeCount struct {
	mu                       sync.Mutex
	attempts, refused, twins int
}

// escapeTotal counts every group's attempts: runEscapeSuite's and TestNetworkEscapes'.
var escapeTotal escapeCount

func (c *escapeCount) add(attempts, refused, twins int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempts += attempts
	c.refused += refused
	c.twins += twins
}

// String is the final line of the package's test output (when any group ran).
func (c *escapeCount) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.attempts == 0 {
		return ""
	}
	return fmt.Sprintf("escape suite: %d attempts, %d refused, %d twins passed", c.attempts, c.refused, c.twins)
}

// escapeEnv is what the attempts aim at: a repository with two linked worktrees (the
// process's and another agent's), the main working tree beside them, and the server's
// files — a home with an SSH key, a configuration and a key file — outside all of them.
type escapeEnv struct {
	base, home, repo, wt, other, config, key, secret string
	p                                                *Provider
}

// escapePython returns the system's python3, which the sandbox's system paths hold (not a
// shim in a home), for the attempts written in it. Without it the test is skipped, or fails
// under CI=true: .ci/run installs it, so the suite never shrinks unseen.
func escapePython(t *testing.T) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed; .ci/run installs it", python)
		}
		t.Skipf("%s is not installed", python)
	}
	return python
}

// newEscapeEnv builds the tree and a provider confined by policy (nil: the default).
func newEscapeEnv(t *testing.T, policy *sandbox.Policy) *escapeEnv {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	if err := sandboxAvailable(); err != nil {
		t.Skipf("the host cannot confine processes: %v", err)
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &escapeEnv{base: base, home: filepath.Join(base, "home"), repo: filepath.Join(base, "repo")}
	e.config = filepath.Join(base, "etc", "sw4rm.env")
	e.key = filepath.Join(base, "keys", "operator.key")
	e.secret = filepath.Join(base, "outside", "secret")
	for path, content := range map[string]string{
		filepath.Join(e.home, ".ssh", "id_ed25519"): "-----BEGIN OPENSSH PRIVATE KEY----- fake\n",
		e.config:                        "SW4RM_DATABASE_URL=postgres://sw4rm:hunter2@db/sw4rm\n",
		e.key:                           "fake operator key\n",
		e.secret:                        "outside\n",
		filepath.Join(e.repo, "README"): "main working tree\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@e", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@e", "HOME="+e.home)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(e.repo, "init", "-q", "-b", "main")
	git(e.repo, "add", "README")
	git(e.repo, "commit", "-q", "-m", "init")
	e.wt = filepath.Join(e.repo, ".sw4rm-worktrees", "a")
	e.other = filepath.Join(e.repo, ".sw4rm-worktrees", "b")
	git(e.repo, "worktree", "add", "-q", "-b", "a", e.wt)
	git(e.repo, "worktree", "add", "-q", "-b", "b", e.other)
	if err := os.MkdirAll(filepath.Join(e.wt, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.wt, "sub", "f"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.p = New(Options{Sandbox: policy})
	return e
}

// sh runs a shell command line through process.run in the process's worktree.
func (e *escapeEnv) sh(script string) error {
	_, err := run(context.Background(), e.p, e.wt, nil, nil, "sh", "-c", script)
	return err
}

// attempt is an escapeAttempt of two shell command lines refused PERMISSION_DENIED.
func (e *escapeEnv) attempt(name, attempt, twin string) escapeAttempt {
	return escapeAttempt{
		name:    name,
		attempt: func(*testing.T) error { return e.sh(attempt) },
		want:    tool.CodePermissionDenied,
		twin:    func(*testing.T) error { return e.sh(twin) },
	}
}

// sandboxAvailable reports why the host cannot confine a process, nil when it can.
func sandboxAvailable() error {
	return sandbox.Available()
}

// The tests' providers confine as the default policy does, plus the test binary's
// directory, since several tests run the test binary itself as the confined program.
func init() {
	defaultSandbox = func() *sandbox.Policy {
		p := sandbox.DefaultPolicy()
		if self, err := os.Executable(); err == nil {
			p.ReadPaths = []string{filepath.Dir(self)}
		}
		return p
	}
}

// TestEscapeFilesystem: a process.run process reads and writes its worktree, its $TMPDIR,
// the system paths and what git needs, and nothing else: the server's home, keys and
// configuration, another worktree, the main working tree, the repository's configuration
// and hooks (for writing), /proc/1/root and links out are all refused PERMISSION_DENIED.
func TestEscapeFilesystem(t *testing.T) {
	e := newEscapeEnv(t, nil)
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	ssh := filepath.Join(e.home, ".ssh", "id_ed25519")
	common := filepath.Join(e.repo, ".git")
	runEscapeSuite(t, "filesystem", []escapeAttempt{
		e.attempt("read ~/.ssh/id_*", "cat "+q(ssh), "cat README"),
		e.attempt("list the server's home", "ls "+q(e.home), "ls sub"),
		e.attempt("read the server's configuration", "cat "+q(e.config), "echo x > \"$TMPDIR/c\" && cat \"$TMPDIR/c\""),
		e.attempt("read the server's key", "cat "+q(e.key), "cat sub/f"),
		e.attempt("read another agent's worktree", "cat "+q(filepath.Join(e.other, "README")), "cat "+q(filepath.Join(e.wt, "README"))),
		e.attempt("write another agent's worktree", "echo x > "+q(filepath.Join(e.other, "pwned")), "echo x > mine"),
		e.attempt("read the main working tree", "cat "+q(filepath.Join(e.repo, "README")), "git show HEAD:README"),
		e.attempt("read through /proc/1/root", "cat "+q("/proc/1/root"+ssh), "cat "+q("/proc/self/root"+filepath.Join(e.wt, "README"))),
		e.attempt("read the worker's environment", fmt.Sprintf("cat /proc/%d/environ", os.Getpid()), "cat /proc/self/environ"),
		e.attempt("write the repository's .git/config", "echo '[core] fsmonitor = evil' >> "+q(filepath.Join(common, "config")), "git config --get core.bare"),
		e.attempt("plant a hook in the repository", "echo evil > "+q(filepath.Join(common, "hooks", "post-checkout")), "git status --short"),
		e.attempt("move a branch of the repository", "echo 0000000000000000000000000000000000000000 > "+q(filepath.Join(common, "refs", "heads", "main")), "git log --oneline -1"),
		e.attempt("read another worktree's git directory", "cat "+q(filepath.Join(common, "worktrees", "b", "HEAD")), "git rev-parse --abbrev-ref HEAD"),
		e.attempt("write outside the worktree", "echo x > "+q(filepath.Join(e.base, "outside", "new")), "echo x > \"$TMPDIR/new\""),
		e.attempt("overwrite a file outside the worktree", "echo x >> "+q(e.secret), "echo x >> README"),
		e.attempt("read /etc/shadow", "cat /etc/shadow", "cat /etc/passwd > /dev/null"),
		e.attempt("a symbolic link to a file out", "ln -s "+q(ssh)+" k && cat k", "ln -s README r && cat r"),
		e.attempt("a symbolic link to another worktree", "ln -s "+q(e.other)+" o && cat o/README", "ln -s sub s && cat s/f"),
		e.attempt("a hard link to a file out", "ln "+q(e.secret)+" hl && cat hl", "ln README hl2 && cat hl2"),
		e.attempt("a hard link to the server's key", "ln "+q(e.key)+" hk", "ln sub/f hk2"),
	})
	if b, err := os.ReadFile(e.secret); err != nil || string(b) != "outside\n" {
		t.Errorf("the file outside the worktree is %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.other, "pwned")); err == nil {
		t.Error("another agent's worktree was written")
	}
	if b, _ := os.ReadFile(filepath.Join(common, "config")); strings.Contains(string(b), "evil") {
		t.Error("the repository's configuration was written")
	}
}

// TestEscapeLimits: a fork bomb, a disk filler, a memory hog and a descriptor hoarder are
// stopped by their limits and refused PERMISSION_DENIED naming the limit; their twins, the
// same work under the limit, succeed.
func TestEscapeLimits(t *testing.T) {
	python := escapePython(t)
	e := newEscapeEnv(t, &sandbox.Policy{Limits: sandbox.Limits{Procs: 64, FileBytes: 1 << 20, MemoryBytes: 2 << 30, OpenFiles: 64}})
	py := func(code string) string { return python + " -c '" + code + "'" }
	runEscapeSuite(t, "limits", []escapeAttempt{
		e.attempt("a fork bomb", "i=0; while [ $i -lt 1000 ]; do sleep 5 & i=$((i+1)); done; wait", "i=0; while [ $i -lt 10 ]; do sleep 0.1 & i=$((i+1)); done; wait"),
		e.attempt("a disk filler", "head -c 100000000 /dev/zero > big", "head -c 100000 /dev/zero > small"),
		e.attempt("a memory hog", py("b = bytearray(3 << 30)"), py("b = bytearray(1 << 20)")),
		e.attempt("a descriptor hoarder", py("fs = [open(\"README\") for _ in range(500)]"), py("fs = [open(\"README\") for _ in range(20)]")),
	})
}
