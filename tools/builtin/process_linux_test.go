//go:build linux

package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// helperArg makes the test binary a helper program: "<binary> builtin-helper dial <addr>"
// connects to addr and exits 0, or 3 when it cannot. The helper is a Go program, so the
// test needs no networking tool on the host.
const helperArg = "builtin-helper"

func TestMain(m *testing.M) {
	// The processes of these tests run under this binary as their init (dieWithWorker).
	RunInitIfAsked()
	if len(os.Args) > 2 && os.Args[1] == helperArg {
		os.Exit(helper(os.Args[2:]))
	}
	code := m.Run()
	// The escape suite's figure over every group that ran (escape_linux_test.go).
	if line := escapeTotal.String(); line != "" {
		fmt.Println(line)
	}
	os.Exit(code)
}

func helper(args []string) int {
	if len(args) == 2 && args[0] == "dial" {
		c, err := net.DialTimeout("tcp", args[1], 5*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			return 3
		}
		c.Close()
		fmt.Println("connected")
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper command", args)
	return 2
}

// run calls process.run with argv in worktree wt under the policy changed by edit.
func run(ctx context.Context, p *Provider, wt string, rec *recorder, edit func(*tools.Request), argv ...string) (tools.Result, error) {
	b, err := json.Marshal(map[string]any{"argv": argv})
	if err != nil {
		panic(err)
	}
	req := request(ToolProcessRun, wt, string(b))
	if edit != nil {
		edit(&req)
	}
	var emit tools.Emit
	if rec != nil {
		emit = rec.emit
	}
	return p.Call(ctx, req, emit)
}

func output(frames []frame, contentType string) string {
	var b strings.Builder
	for _, f := range frames {
		if f.contentType == contentType {
			b.WriteString(f.data)
		}
	}
	return b.String()
}

func TestProcessRunInWorktree(t *testing.T) {
	p := New(Options{})
	wt := t.TempDir()
	real, err := filepath.EvalSymlinks(wt)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	res, err := run(context.Background(), p, wt, rec, nil, "sh", "-c", `pwd; echo "$HOME"; echo oops >&2; echo made > made.txt`)
	if err != nil {
		t.Fatal(err)
	}
	checkOutput(t, p, ToolProcessRun, res)
	got := decode[processResult](t, res)
	wantOut := real + "\n" + real + "\n"
	if out := output(rec.all(), ContentTypeStdout); out != wantOut {
		t.Errorf("stdout = %q, want %q (the worktree, twice)", out, wantOut)
	}
	if errOut := output(rec.all(), ContentTypeStderr); errOut != "oops\n" {
		t.Errorf("stderr = %q", errOut)
	}
	if got.ExitCode != 0 || got.StdoutBytes != int64(len(wantOut)) || got.StderrBytes != 5 {
		t.Errorf("result = %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(wt, "made.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("the process's relative write went elsewhere: %q, %v", b, err)
	}
}

func TestProcessRunStdin(t *testing.T) {
	p := New(Options{})
	rec := &recorder{}
	req := request(ToolProcessRun, t.TempDir(), `{"argv":["tr","a-z","A-Z"],"stdin":"shout\n"}`)
	if _, err := p.Call(context.Background(), req, rec.emit); err != nil {
		t.Fatal(err)
	}
	if out := output(rec.all(), ContentTypeStdout); out != "SHOUT\n" {
		t.Errorf("stdout = %q", out)
	}
}

func TestProcessRunFailure(t *testing.T) {
	p := New(Options{StderrTailBytes: 16})
	wt := t.TempDir()
	_, err := run(context.Background(), p, wt, nil, nil, "sh", "-c", `echo "a long beginning that is cut off" >&2; echo "the end" >&2; exit 7`)
	wantCode(t, err, tool.CodeToolFailed, "exited with code 7")
	if !strings.Contains(err.Error(), "the end") || strings.Contains(err.Error(), "beginning") {
		t.Errorf("the message should quote only the stderr tail: %v", err)
	}
	_, err = run(context.Background(), p, wt, nil, nil, "sh", "-c", `kill -TERM $$`)
	wantCode(t, err, tool.CodeToolFailed, "killed by signal terminated")
	_, err = run(context.Background(), p, wt, nil, nil, "no-such-program-anywhere")
	wantCode(t, err, tool.CodeToolFailed, "cannot start")
	_, err = run(context.Background(), p, wt, nil, nil, "")
	wantCode(t, err, tool.CodeValidation, "argv must name a program")
}

func TestProcessRunPolicyRefusals(t *testing.T) {
	p := New(Options{})
	wt := t.TempDir()
	marker := filepath.Join(wt, "ran")
	script := "touch " + marker
	for _, tt := range []struct {
		name string
		edit func(*tools.Request)
		code tool.Code
		want string
	}{
		{"minimal privilege", func(r *tools.Request) { r.Policy.Privilege = tool.PrivilegeMinimal }, tool.CodePermissionDenied, "ask for privilege_level DEFAULT or higher"},
		{"unresolved privilege", func(r *tools.Request) { r.Policy.Privilege = 0 }, tool.CodePermissionDenied, "MINIMAL forbids process spawning"},
		{"egress restricted", func(r *tools.Request) { r.Policy.Network = tool.NetworkEgressRestricted }, tool.CodePermissionDenied, "SW4RM_TOOL_EGRESS_ALLOW"},
		{"unknown network", func(r *tools.Request) { r.Policy.Network = "SOMETIMES" }, tool.CodeValidation, "SOMETIMES"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(context.Background(), p, wt, nil, tt.edit, "sh", "-c", script)
			wantCode(t, err, tt.code, tt.want)
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("a refused call ran its process")
			}
		})
	}
}

func TestProcessRunStreamsInOrder(t *testing.T) {
	p := New(Options{ChunkBytes: 64})
	rec := &recorder{}
	var want strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	_, err := run(context.Background(), p, t.TempDir(), rec, nil, "sh", "-c", `i=1; while [ $i -le 500 ]; do echo line-$i; i=$((i+1)); done`)
	if err != nil {
		t.Fatal(err)
	}
	frames := rec.all()
	if out := output(frames, ContentTypeStdout); out != want.String() {
		t.Fatalf("stdout, frames joined, differs from what was written: %d bytes, want %d", len(out), want.Len())
	}
	if len(frames) < want.Len()/64 {
		t.Errorf("%d frames for %d bytes in chunks of at most 64", len(frames), want.Len())
	}
	for _, f := range frames {
		if len(f.data) > 64 || len(f.data) == 0 {
			t.Fatalf("frame of %d bytes", len(f.data))
		}
	}

	// The streams interleave in the order they were written.
	rec = &recorder{}
	_, err = run(context.Background(), p, t.TempDir(), rec, nil, "sh", "-c", `echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rec.all() {
		got = append(got, f.contentType+" "+f.data)
	}
	want3 := []string{ContentTypeStdout + " one\n", ContentTypeStderr + " two\n", ContentTypeStdout + " three\n"}
	if strings.Join(got, "|") != strings.Join(want3, "|") {
		t.Errorf("frames = %q, want %q", got, want3)
	}
}

// TestProcessRunCancel: cancelling the call kills the process and what it started.
func TestProcessRunCancel(t *testing.T) {
	p := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{onFrame: func(frame) { cancel() }}
	start := time.Now()
	dir := t.TempDir()
	_, err := run(ctx, p, dir, rec, nil, "sh", "-c", `sleep 30 & echo started; wait`)
	wantCode(t, err, tool.CodeCancelled, "")
	if time.Since(start) > 20*time.Second {
		t.Fatalf("the call returned after %s: the sleep was not killed", time.Since(start))
	}
	if left := runningIn(dir); len(left) > 0 {
		t.Errorf("processes %v outlived the cancelled call", left)
	}

	deadline, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err = run(deadline, p, t.TempDir(), nil, nil, "sleep", "30")
	wantCode(t, err, tool.CodeToolTimeout, "deadline")

	// A call that can take no more frames stops its process.
	rec = &recorder{fail: errors.New("call cancelled")}
	_, err = run(context.Background(), p, t.TempDir(), rec, nil, "sh", "-c", `echo hi; sleep 30`)
	wantCode(t, err, tool.CodeCancelled, "no more frames")
}

// TestProcessRunKillsLeftovers: a process that exits leaving a child behind in its group
// does not leave it running after the call.
func TestProcessRunKillsLeftovers(t *testing.T) {
	p := New(Options{})
	scripts := map[string]string{
		// The child's output goes elsewhere, so that the call does not wait for it.
		"in the group": `sleep 30 >/dev/null 2>&1 & echo started`,
	}
	if pidNamespaces() {
		// Only the PID namespace catches a descendant that left the process group.
		// The script waits until the child has left (setsid runs before the file is made).
		scripts["left the group"] = `setsid sh -c 'touch left; exec sleep 30' >/dev/null 2>&1 </dev/null & while [ ! -e left ]; do sleep 0.01; done; echo started`
	}
	for name, script := range scripts {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := run(context.Background(), p, dir, &recorder{}, nil, "sh", "-c", script); err != nil {
				t.Fatal(err)
			}
			if left := runningIn(dir); len(left) > 0 {
				t.Errorf("processes %v outlived the call", left)
			}
		})
	}
}

// TestProcessRunUnderInit: where PID namespaces are allowed, the program runs under this
// binary as the init of its own namespace — not as PID 1 itself, so that signals it sends
// itself work — and orphans of its are reaped.
func TestProcessRunUnderInit(t *testing.T) {
	if !pidNamespaces() {
		t.Skip("this host allows no PID namespaces: processes run without an init")
	}
	p := New(Options{})
	rec := &recorder{}
	if _, err := run(context.Background(), p, t.TempDir(), rec, nil, "sh", "-c", `echo $$ $PPID`); err != nil {
		t.Fatal(err)
	}
	ids := strings.Fields(output(rec.all(), ContentTypeStdout))
	if len(ids) != 2 || ids[0] == "1" || ids[1] != "1" {
		t.Errorf("the program's pid and parent's pid in its namespace are %q, want a pid other than 1 whose parent is 1 (the init)", ids)
	}
	_, err := run(context.Background(), p, t.TempDir(), nil, nil, "sh", "-c", `(sleep 0.1 &) ; kill -TERM $$`)
	wantCode(t, err, tool.CodeToolFailed, "killed by signal terminated")
}

// runningIn returns the processes, not zombies, whose working directory is dir, after giving
// the kernel a moment to deliver the kills sent before the call returned.
func runningIn(dir string) []int {
	var pids []int
	for range 50 {
		pids = pids[:0]
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
			if err != nil || cwd != dir {
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			// The state follows the command name, which is in parentheses.
			if i := strings.LastIndexByte(string(b), ')'); err != nil || (i > 0 && strings.HasPrefix(string(b[i:]), ") Z")) {
				continue
			}
			pids = append(pids, pid)
		}
		if len(pids) == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return pids
}

func TestProcessRunCPUBudget(t *testing.T) {
	p := New(Options{})
	budget := func(r *tools.Request) { r.Policy.BudgetCPU = 200 * time.Millisecond }
	// The test's own deadline only keeps a broken budget from hanging the test; it would
	// end the call with TOOL_TIMEOUT, not CPU_BUDGET_EXCEEDED.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, script := range map[string]string{
		"the process":  `while :; do :; done`,
		"a child":      `sh -c 'while :; do :; done' & wait`,
		"a grandchild": `(sh -c 'while :; do :; done' & wait) & wait`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := run(ctx, p, t.TempDir(), nil, budget, "sh", "-c", script)
			wantCode(t, err, tool.CodeCPUBudgetExceeded, "budget_cpu_ms 200")
		})
	}

	// Under budget, the call succeeds and reports what it used. The budget here is roomier:
	// the child's setup before exec (a network namespace under DENY_ALL) is charged to it
	// too, and on a loaded machine that alone once took 239 ms.
	roomy := func(r *tools.Request) { r.Policy.BudgetCPU = 5 * time.Second }
	res, err := run(ctx, p, t.TempDir(), nil, roomy, "sh", "-c", "echo quick")
	if err != nil {
		t.Fatal(err)
	}
	if got := decode[processResult](t, res); got.CPUMS > 5000 {
		t.Errorf("cpu_ms = %d", got.CPUMS)
	}

	// A process that exits over its budget between two samples is caught at exit.
	unwatched := New(Options{CPUPollInterval: time.Hour})
	tiny := func(r *tools.Request) { r.Policy.BudgetCPU = time.Millisecond }
	_, err = run(ctx, unwatched, t.TempDir(), nil, tiny, "sh", "-c", `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done`)
	wantCode(t, err, tool.CodeCPUBudgetExceeded, "budget_cpu_ms 1")
}

// TestProcessRunNetwork: under DENY_ALL a process sees no network but an unusable loopback
// and cannot connect even to the host's localhost; under FULL_ACCESS it can (the proxied
// policies are TestNetworkEscapes').
func TestProcessRunNetwork(t *testing.T) {
	p := New(Options{})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()

	rec := &recorder{}
	if _, err := run(context.Background(), p, t.TempDir(), rec, nil, "cat", "/proc/net/dev"); err != nil {
		t.Fatal(err)
	}
	var ifaces []string
	for _, line := range strings.Split(output(rec.all(), ContentTypeStdout), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if strings.Join(ifaces, ",") != "lo" {
		t.Errorf("interfaces under DENY_ALL = %v, want only lo", ifaces)
	}

	_, err = run(context.Background(), p, t.TempDir(), nil, nil, self, helperArg, "dial", ln.Addr().String())
	wantCode(t, err, tool.CodeToolFailed, "exited with code 3")
	select {
	case <-accepted:
		t.Fatal("a DENY_ALL process reached the listener")
	default:
	}

	for _, policy := range []tool.NetworkPolicy{tool.NetworkFullAccess} {
		rec := &recorder{}
		open := func(r *tools.Request) { r.Policy.Network = policy }
		if _, err := run(context.Background(), p, t.TempDir(), rec, open, self, helperArg, "dial", ln.Addr().String()); err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		<-accepted
		if out := output(rec.all(), ContentTypeStdout); out != "connected\n" {
			t.Errorf("%s: stdout = %q", policy, out)
		}
	}
}

func TestStartError(t *testing.T) {
	for _, tt := range []struct {
		err      error
		isolated bool
		code     tool.Code
		want     string
	}{
		{syscall.EPERM, true, tool.CodePermissionDenied, "refused a new network namespace"},
		{syscall.EINVAL, true, tool.CodePermissionDenied, "DENY_ALL cannot be enforced"},
		{syscall.ENOSPC, true, tool.CodePermissionDenied, "EGRESS_UNRESTRICTED"},
		{&os.PathError{Op: "fork/exec", Path: "/bin/x", Err: syscall.EACCES}, true, tool.CodeToolFailed, "cannot start"},
		{syscall.EPERM, false, tool.CodeToolFailed, "cannot start"},
		{&exec.Error{Name: "x", Err: exec.ErrNotFound}, true, tool.CodeToolFailed, "cannot start"},
		{syscall.EAGAIN, false, tool.CodeInternal, "starting"},
	} {
		wantCode(t, startError(ToolProcessRun, "x", tt.isolated, tt.err), tt.code, tt.want)
	}
}
