//go:build linux

package builtin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/tools/cpuwatch"
)

// TestEscapeProcesses: a process.run process reaches no other process and no more of the
// kernel than its call: it cannot ptrace or signal the worker (its PID namespace does not
// show it: "No such process", TOOL_FAILED), open the worker's
// memory, descriptors, namespaces or root through the host's /proc, read the server's
// environment, mount, unshare, chroot, make device nodes, write /dev/shm or /tmp outside its
// $TMPDIR, read another call's $TMPDIR, follow a symbolic link swapped to point out (raced
// and not), or outrun its CPU budget by leaving its session; each refused with its code, and
// each twin — the same operation on its own process, file or budget — works.
func TestEscapeProcesses(t *testing.T) {
	python := escapePython(t)
	if !initHooked.Load() || !pidNamespaces() {
		t.Skip("process.run has no init or no PID namespaces here (docs/tools.md)")
	}
	e := newEscapeEnv(t, nil)
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	// py runs Python code given in double quotes inside the shell's single quotes; a failed
	// system call raises OSError, which Python reports with the errno's name on stderr.
	py := func(code string) string { return python + " -c '" + code + "'" }
	syscallPy := func(call string) string {
		return py(`import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); r = ` + call +
			`; e = ctypes.get_errno(); exec("raise OSError(e, os.strerror(e))") if r != 0 else None`)
	}
	worker := os.Getpid()
	server := os.Getppid() // the process that started the worker: what a server's supervisor would be
	const ptraceSeize = 0x4206
	const cloneNewNS = 0x00020000
	ssh := filepath.Join(e.home, ".ssh", "id_ed25519")
	noSuch := func(a escapeAttempt) escapeAttempt {
		// Outside its PID namespace no process exists for the call: the system call fails
		// ESRCH, a program failure, not the sandbox's — so the message proves the refusal.
		a.want, a.msg = tool.CodeToolFailed, "No such process"
		return a
	}
	attempts := []escapeAttempt{
		noSuch(e.attempt("ptrace the worker by its host pid",
			syscallPy(fmt.Sprintf("libc.ptrace(%d, %d, 0, 0)", ptraceSeize, worker)),
			"strace -f -o /dev/null sh -c true")),
		noSuch(e.attempt("ptrace the server by its host pid",
			syscallPy(fmt.Sprintf("libc.ptrace(%d, %d, 0, 0)", ptraceSeize, server)),
			"grep -q '^TracerPid:' /proc/self/status")),
		noSuch(e.attempt("signal the worker (SIGTERM by its host pid)",
			py(fmt.Sprintf("import os, signal; os.kill(%d, signal.SIGTERM)", worker)),
			"sleep 30 & kill -TERM $!; wait $!; test $? -eq 143")),
		noSuch(e.attempt("signal the server (SIGKILL by its host pid)",
			py(fmt.Sprintf("import os, signal; os.kill(%d, signal.SIGKILL)", server)),
			py("import os, signal, subprocess; c = subprocess.Popen([\"sleep\", \"30\"]); os.kill(c.pid, signal.SIGKILL); c.wait()"))),
		e.attempt("read the worker's memory (/proc/<pid>/mem)",
			fmt.Sprintf("head -c 16 /proc/%d/mem", worker), "head -c 16 /proc/self/status"),
		e.attempt("read the worker's open files (/proc/<pid>/fd/0)",
			fmt.Sprintf("cat /proc/%d/fd/0 < /dev/null", worker), "ls -l /proc/self/fd/ > /dev/null"),
		e.attempt("read through the worker's root (/proc/<pid>/root)",
			"cat "+q(fmt.Sprintf("/proc/%d/root%s", worker, ssh)), "cat "+q("/proc/self/root"+filepath.Join(e.wt, "sub", "f"))),
		e.attempt("read through the worker's working directory (/proc/<pid>/cwd)",
			fmt.Sprintf("ls /proc/%d/cwd/", worker), "ls /proc/self/cwd/"),
		e.attempt("read the server's environment (/proc/<pid>/environ)",
			fmt.Sprintf("cat /proc/%d/environ", server), "test -n \"$TMPDIR\" && cat /proc/self/environ > /dev/null"),
		e.attempt("open the worker's mount namespace (setns's way in)",
			fmt.Sprintf("cat /proc/%d/ns/mnt", worker), "readlink /proc/self/ns/mnt"),
		e.attempt("mount a tmpfs over the worktree",
			syscallPy(`libc.mount(b"none", b"sub", b"tmpfs", 0, None)`), "cat sub/f"),
		e.attempt("unshare a mount namespace",
			syscallPy(fmt.Sprintf("libc.unshare(%d)", cloneNewNS)), "cat README"),
		e.attempt("unshare a user and a mount namespace, then mount",
			"unshare -U -r -m mount -t tmpfs none sub", "unshare -U -r true || true; cat sub/f"),
		e.attempt("chroot into the worktree", "chroot sub /bin/true", "cat sub/f"),
		e.attempt("make a character device node (/dev/mem's)", "mknod mem c 1 1", "mkfifo fifo && rm fifo"),
		e.attempt("make a block device node (a disk's)", "mknod disk b 8 0", "mkfifo \"$TMPDIR/fifo\" && rm \"$TMPDIR/fifo\""),
		e.attempt("read the host's /sys", "ls /sys/class", "ls /proc/self/"),
		e.attempt("write /dev/shm", "echo x > /dev/shm/sw4rm-escape-$$", "echo x > \"$TMPDIR/shm\" && cat \"$TMPDIR/shm\""),
		e.attempt("write /tmp outside the private $TMPDIR", "echo x > /tmp/sw4rm-escape-$$", "echo x > \"$TMPDIR/x\" && cat \"$TMPDIR/x\""),
		e.attempt("write /var/tmp", "echo x > /var/tmp/sw4rm-escape-$$", "echo x > \"$TMPDIR/var\""),
		e.attempt("a symbolic link swapped to point out after a read through it",
			"ln -s sub/f l && cat l && ln -sfn "+q(e.secret)+" l && cat l",
			"ln -s sub/f l2 && cat l2 && ln -sfn README l2 && cat l2"),
		e.attempt("a directory link swapped to point out",
			"ln -s sub d && cat d/f && ln -sfn "+q(filepath.Dir(e.secret))+" d && cat d/secret",
			"ln -s sub d2 && cat d2/f && ln -sfn . d2 && cat d2/README"),
		e.attempt("a symbolic link raced between a file in and a file out",
			// A swapper repoints the link while a reader reads it: whichever state a read
			// meets, the secret never comes back. The race has no timing to lose: at its end
			// the link is left pointing out and read once more.
			"ln -s sub/f r; (i=0; while [ $i -lt 300 ]; do ln -sfn "+q(e.secret)+" r; ln -sfn sub/f r; i=$((i+1)); done) & "+
				"i=0; while [ $i -lt 300 ]; do cat r >> got 2>> err; i=$((i+1)); done; wait; "+
				"if grep -q outside got; then echo ESCAPED; exit 0; fi; ln -sfn "+q(e.secret)+" r; cat r",
			"ln -s sub/f r2; (i=0; while [ $i -lt 300 ]; do ln -sfn README r2; ln -sfn sub/f r2; i=$((i+1)); done) & "+
				"i=0; while [ $i -lt 300 ]; do cat r2 > /dev/null; i=$((i+1)); done; wait"),
		e.attempt("a relative symbolic link climbing out of the worktree",
			"ln -s "+q(relTo(e.wt, e.secret))+" up && cat up", "ln -s sub/../README up2 && cat up2"),
		e.attempt("a symbolic link in $TMPDIR to a file out",
			"ln -s "+q(e.key)+" \"$TMPDIR/k\" && cat \"$TMPDIR/k\"", "ln -s "+q(filepath.Join(e.wt, "README"))+" \"$TMPDIR/r\" && cat \"$TMPDIR/r\""),
		otherTMPDIR(t, e),
		cpuBudgetSetsid(t),
	}
	runEscapeSuite(t, "processes", attempts)
	if b, err := os.ReadFile(e.secret); err != nil || string(b) != "outside\n" {
		t.Errorf("the file outside the worktree is %q, %v", b, err)
	}
	for _, dir := range []string{"/dev/shm", "/tmp", "/var/tmp"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "sw4rm-escape-*")); len(m) > 0 {
			t.Errorf("%s was written: %v", dir, m)
		}
	}
}

// relTo is target as a path relative to dir.
func relTo(dir, target string) string {
	r, err := filepath.Rel(dir, target)
	if err != nil {
		panic(err)
	}
	return r
}

// otherTMPDIR: a call reads the private $TMPDIR of another call running at the same time
// (another agent's), whose path it has learned; the twin reads its own.
func otherTMPDIR(t *testing.T, e *escapeEnv) escapeAttempt {
	return escapeAttempt{
		name: "read another call's private $TMPDIR",
		want: tool.CodePermissionDenied,
		attempt: func(t *testing.T) error {
			// The other call writes a secret into its $TMPDIR, says where, and waits
			// (at most a minute) until this test tells it to end.
			other := t.TempDir()
			done := make(chan error, 1)
			go func() {
				done <- func() error {
					_, err := run(context.Background(), e.p, other, nil, nil, "sh", "-c",
						`echo secret > "$TMPDIR/s" && echo "$TMPDIR" > where; i=0; while [ ! -e end ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`)
					return err
				}()
			}()
			var where string
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if b, err := os.ReadFile(filepath.Join(other, "where")); err == nil && strings.HasSuffix(string(b), "\n") {
					where = strings.TrimSpace(string(b))
					break
				}
			}
			var err error
			if where == "" {
				err = fmt.Errorf("the other call never said where its $TMPDIR is")
			} else {
				err = e.sh("cat '" + filepath.Join(where, "s") + "'")
			}
			_ = os.WriteFile(filepath.Join(other, "end"), nil, 0o644)
			if oerr := <-done; oerr != nil {
				t.Errorf("the other call: %v", oerr)
			}
			return err
		},
		twin: func(*testing.T) error { return e.sh(`echo mine > "$TMPDIR/s" && grep -q mine "$TMPDIR/s"`) },
	}
}

// cpuBudgetSetsid: a busy loop double-forked with setsid, in another session and process
// group, an orphan, is still counted against budget_cpu_ms and the call ends
// CPU_BUDGET_EXCEEDED; the twin, the same double fork of a short sleep, ends well.
// (tools/builtin/cpu_linux_test.go runs it under each watch mechanism.)
func cpuBudgetSetsid(t *testing.T) escapeAttempt {
	budget := func(r *tools.Request) { r.Policy.BudgetCPU = 200 * time.Millisecond }
	call := func(t *testing.T, script string) error {
		if _, err := exec.LookPath("setsid"); err != nil {
			t.Skip("setsid is not installed")
		}
		if !cpuwatch.CgroupAvailable() && !pidNamespaces() {
			t.Skip("neither a cgroup nor PID namespaces to count an orphan with")
		}
		// The deadline only keeps a broken watch from hanging the test (TOOL_TIMEOUT).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := run(ctx, New(Options{}), t.TempDir(), nil, budget, "sh", "-c", script)
		return err
	}
	return escapeAttempt{
		name: "burn CPU past budget_cpu_ms in a setsid orphan",
		want: tool.CodeCPUBudgetExceeded,
		attempt: func(t *testing.T) error {
			return call(t, `setsid sh -c 'sh -c "while :; do :; done" & exit 0'; sleep 60`)
		},
		twin: func(t *testing.T) error { return call(t, `setsid sh -c 'sh -c "sleep 0.2" & exit 0'; sleep 0.5`) },
	}
}
