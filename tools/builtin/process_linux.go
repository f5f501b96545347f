//go:build linux

package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sw4rm/sw4rm-temporal/confine"
	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// outputGrace is how long output is still read after the process group was killed: only a
// descendant that left the group (setsid) can keep the pipes open that long, and its output
// is not waited for.
const outputGrace = time.Second

// errCPUBudget ends a process whose group used more CPU time than budget_cpu_ms.
var errCPUBudget = errors.New("the CPU budget is exhausted")

// runProcess runs the process in the worktree (confine.Command: the worktree as directory,
// a scrubbed environment, a process group of its own) and streams its output as frames.
// Whatever ends it — exit, ctx, the CPU budget, a call that takes no more frames — the
// whole process group is killed before the call returns, so nothing it started outlives
// the call (§18.6: cleanup). It stays one function because every exit path must reach the
// same kill-the-group cleanup in order; split, those paths would be harder to check.
func (p *Provider) runProcess(ctx context.Context, req tools.Request, a processArgs, nw *netPlan, emit tools.Emit) (tools.Result, error) {
	cpuw, err := newCPUWatch(req, a.Argv[0]) // budget_cpu_ms (cpu_linux.go); nil without a budget
	if err != nil {
		return tools.Result{}, err
	}
	defer cpuw.Close()
	root, err := p.openWorktree(req)
	if err != nil {
		return tools.Result{}, err
	}
	defer func() { _ = root.Close() }()

	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	cmd := confine.Command(runCtx, root, a.Argv[0], a.Argv[1:]...)
	if nw.isolate {
		isolateNetwork(cmd)
	}
	sigR, err := dieWithWorker(cmd)
	if err != nil {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "tool %q: %v", req.ToolName, err)
	}
	if sigR != nil {
		defer sigR.Close()
	}
	sb, err := p.sandboxProcess(req, a, cmd) // Landlock and resource limits (sandbox_linux.go)
	if err != nil {
		return tools.Result{}, err
	}
	if sb != nil {
		defer sb.Cleanup()
	}
	if err := nw.attach(cmd); err != nil {
		return tools.Result{}, attachError(req.ToolName, a.Argv[0], err)
	}
	if a.Stdin != nil {
		cmd.Stdin = strings.NewReader(*a.Stdin)
	}
	// Stdin is copied by a goroutine of exec's; a descendant holding it open must not keep
	// Wait from returning.
	cmd.WaitDelay = outputGrace
	outR, outW, err := os.Pipe()
	if err != nil {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "tool %q: %v", req.ToolName, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "tool %q: %v", req.ToolName, err)
	}
	// The process writes into the pipes directly (no copying goroutine of exec's), so that
	// Wait returns when the process exits, not when the last descendant closes its output.
	cmd.Stdout, cmd.Stderr = outW, errW
	cpuw.Apply(cmd) // in the call's own cgroup, when there is one
	err = startLocked(cmd)
	// The child holds its own copies of the write ends; ours would keep the reads from
	// ever seeing the end of the output.
	outW.Close()
	errW.Close()
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		outR.Close()
		errR.Close()
		return tools.Result{}, startError(req.ToolName, a.Argv[0], nw.isolate, err)
	}
	nw.start(runCtx)
	pgid := cmd.Process.Pid // Setpgid made the child the leader of a group of its own
	cpuw.Started(pgid, pgid)

	pieces := make(chan piece, 16)
	var readers sync.WaitGroup
	for _, s := range []struct {
		f           *os.File
		contentType string
	}{{outR, ContentTypeStdout}, {errR, ContentTypeStderr}} {
		readers.Go(func() {
			defer s.f.Close()
			buf := make([]byte, p.opts.ChunkBytes)
			for {
				n, err := s.f.Read(buf)
				if n > 0 {
					pieces <- piece{contentType: s.contentType, data: append([]byte(nil), buf[:n]...)}
				}
				if err != nil {
					return
				}
			}
		})
	}
	go func() {
		readers.Wait()
		close(pieces)
	}()

	exited := make(chan struct{})
	var waitErr error
	go func() {
		defer close(exited)
		waitErr = cmd.Wait()
		// What the process left running in its group ends with the call.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		endCPUWatched(cpuw) // and what left the group, in the call's cgroup
		deadline := time.Now().Add(outputGrace)
		_ = outR.SetReadDeadline(deadline)
		_ = errR.SetReadDeadline(deadline)
	}()

	var watched atomic.Int64 // the most CPU time the watcher saw, in ms
	if budget := req.Policy.BudgetCPU; budget > 0 {
		go p.watchCPU(runCtx, exited, cpuw, budget, &watched, stop)
	}

	s := &streamer{ctx: ctx, emit: emit, chunk: p.opts.ChunkBytes, tailMax: p.opts.StderrTailBytes}
	flush := time.NewTicker(p.opts.FlushInterval)
	defer flush.Stop()
	for pieces != nil {
		select {
		case pc, ok := <-pieces:
			if !ok {
				pieces = nil
				continue
			}
			s.add(pc)
		case <-flush.C:
			s.flush()
		}
		if s.err != nil && runCtx.Err() == nil {
			stop(errEmitFailed)
		}
	}
	s.flush()
	<-exited

	ps := cmd.ProcessState
	if ps == nil {
		return tools.Result{}, tool.Errorf(tool.CodeInternal, "tool %q: waiting for %q: %v", req.ToolName, a.Argv[0], waitErr)
	}
	// rusage counts the process and the descendants it waited for; the watcher's samples
	// also saw descendants still running, or orphaned.
	exact := exactCPU(ps, cpuw)
	cpu := max(exact, time.Duration(watched.Load())*time.Millisecond)
	cause := context.Cause(runCtx)
	switch budget := req.Policy.BudgetCPU; {
	case errors.Is(cause, errCPUBudget) || (budget > 0 && exact > budget):
		return tools.Result{}, tool.Errorf(tool.CodeCPUBudgetExceeded,
			"tool %q: %q and its children used %d ms of CPU time, more than budget_cpu_ms %d; its processes were killed", req.ToolName, a.Argv[0], cpu.Milliseconds(), budget.Milliseconds())
	case ctx.Err() != nil:
		return tools.Result{}, ctxError(ctx, req.ToolName)
	case errors.Is(cause, errEmitFailed):
		return tools.Result{}, tool.Errorf(tool.CodeCancelled, "tool %q: the call takes no more frames (%v); the process group was killed", req.ToolName, s.err)
	}
	if !ps.Success() {
		what := fmt.Sprintf("exited with code %d", ps.ExitCode())
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			what = "was killed by signal " + ws.Signal().String()
		} else if sig, ok := reportedSignal(sigR); ok {
			what = "was killed by signal " + sig.String()
		}
		tail := s.stderrTail()
		if err := sandboxRefusal(sb, req.ToolName, a.Argv[0], what, tail); err != nil {
			return tools.Result{}, err
		}
		if tail == "" {
			tail = "(nothing)"
		}
		return tools.Result{}, tool.Errorf(tool.CodeToolFailed, "tool %q: %q %s; the end of its stderr: %s", req.ToolName, a.Argv[0], what, tail)
	}
	return jsonResult(req.ToolName, processResult{ExitCode: ps.ExitCode(), StdoutBytes: s.stdout, StderrBytes: s.stderr, CPUMS: cpu.Milliseconds()})
}

// isolateNetwork starts the process in a new network namespace, which holds nothing but a
// loopback interface that is down: no connection in or out, not even to the host's
// localhost (§18.5.2 DENY_ALL). A server that is not root needs a user namespace to create
// it; the process's user and group are mapped to themselves in it, so it gains no privilege.
// The process group set by confine.Command stays.
func isolateNetwork(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	attr := cmd.SysProcAttr
	attr.Cloneflags |= syscall.CLONE_NEWNET
	sandbox.OwnUserNamespace(attr)
}

// dieWithWorker makes the process die with the worker that started it — a worker killed with
// SIGKILL runs no cleanup of its own — and everything it started with it. The process gets
// SIGKILL when its parent dies (Pdeathsig). Where this executable calls RunInitIfAsked and
// the host allows PID namespaces, the program runs under this executable as the init of a
// new PID namespace, whose end the kernel makes the end of every process in it, including
// descendants that left the process group (setsid); the init passes on signals, reaps
// orphans and reports a program killed by a signal on the returned pipe. Otherwise only the
// process itself dies with the worker.
func dieWithWorker(cmd *exec.Cmd) (*os.File, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	attr := cmd.SysProcAttr
	attr.Pdeathsig = syscall.SIGKILL
	if cmd.Err != nil || !initHooked.Load() || !pidNamespaces() {
		return nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil // run it directly, as without the hook
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Args = append([]string{self, initArg, cmd.Path}, cmd.Args...)
	cmd.Path = self
	cmd.ExtraFiles = append(cmd.ExtraFiles, w) // fd 3 in the init
	attr.Cloneflags |= syscall.CLONE_NEWPID
	sandbox.OwnUserNamespace(attr)
	return r, nil
}

// reportedSignal reads the signal an init reported (dieWithWorker); none when r is nil or
// empty.
func reportedSignal(r *os.File) (syscall.Signal, bool) {
	if r == nil {
		return 0, false
	}
	_ = r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	b := make([]byte, 16)
	n, _ := r.Read(b)
	sig, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || sig <= 0 {
		return 0, false
	}
	return syscall.Signal(sig), true
}

// pidNamespaces reports whether the host lets this server start a process in a new PID
// namespace (sandbox.PIDNamespaces: one trial per process, shared with the MCP servers).
var pidNamespaces = sandbox.PIDNamespaces

// startLocked starts cmd from a goroutine locked to its OS thread: Pdeathsig fires when the
// thread that started the process ends, and the Go runtime ends a thread only when a
// goroutine exits while locked to it — this one unlocks, so the thread lives on in the
// runtime's pool.
func startLocked(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// startError maps a failure to start the process. With a network namespace requested, the
// errors the kernel gives when it refuses one (namespaces disabled, not permitted, a limit
// reached) are PERMISSION_DENIED: the process is not run without the isolation its policy
// asked for.
func startError(name, program string, isolated bool, err error) error {
	if isolated {
		for _, refusal := range []error{syscall.EPERM, syscall.EINVAL, syscall.ENOSPC, syscall.EUSERS, syscall.ENOSYS} {
			if errors.Is(err, refusal) {
				return tool.Errorf(tool.CodePermissionDenied,
					"tool %q: %q was not started: the host refused a new network namespace (%v), so network_policy DENY_ALL cannot be enforced here; the deployment must allow network namespaces (user namespaces too when the server does not run as root), or the call must ask for EGRESS_UNRESTRICTED", name, program, err)
			}
		}
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) {
		return tool.Errorf(tool.CodeToolFailed, "tool %q: cannot start %q: %v", name, program, err)
	}
	return tool.Errorf(tool.CodeInternal, "tool %q: starting %q: %v", name, program, err)
}
