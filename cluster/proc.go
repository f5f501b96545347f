package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process of the cluster: what to run (kept, so that it can be started
// again after a kill) and the run in progress, in a process group of its own so that a kill
// reaches everything it started (a PostgreSQL postmaster's backends, for one).
type proc struct {
	name   string
	binary string
	args   []string
	env    []string
	dir    string
	log    string // path of its combined output, appended to by every run
	cred   *syscall.Credential
	// stopSig asks the process to stop; zero means SIGTERM.
	stopSig syscall.Signal
	ready   func(p *proc, marker string) (bool, error) // nil: started is ready
	addr    string                                     // gRPC address of a server, for the load balancer
	metric  string                                     // its /metrics URL, if any

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the wait result of the last run, valid after done is closed
	runs int
}

// start runs the process once; the caller waits for readiness.
func (p *proc) start() (marker string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return "", fmt.Errorf("%s is already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", fmt.Errorf("%s: open log: %w", p.name, err)
	}
	p.runs++
	// The marker separates the runs in the one log, so that readiness is judged on the
	// current run's lines only.
	marker = fmt.Sprintf("---- %s run %d start %s (%s)", p.name, p.runs, time.Now().Format(time.RFC3339Nano), p.binary)
	fmt.Fprintln(out, marker)
	cmd := exec.Command(p.binary, p.args...)
	cmd.Env = p.env
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	if err := cmd.Start(); err != nil {
		out.Close()
		return "", fmt.Errorf("%s: start %s: %w", p.name, p.binary, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		out.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return marker, nil
}

// waitReady polls the process's readiness check until it holds, the process exits, ctx
// ends or timeout passes.
func (p *proc) waitReady(ctx context.Context, marker string, timeout time.Duration) error {
	if p.ready == nil {
		return nil
	}
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.exited() {
			return fmt.Errorf("%s exited during start (%v); log tail:\n%s", p.name, p.waitErr(), tail(p.log, 30))
		}
		ok, err := p.ready(p, marker)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s (last: %v); log tail:\n%s", p.name, timeout, last, tail(p.log, 30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", p.name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig to the process group of the current run, if it runs.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

// kill is kill -9 of the process group; it returns when the process has been reaped.
func (p *proc) kill() {
	// Descendants that left the group count too: PostgreSQL's backends each start a session
	// of their own, and a crash takes them all at once, not after they notice the
	// postmaster's death.
	desc := descendants(p.pid())
	p.signal(syscall.SIGKILL)
	for _, pid := range desc {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	p.wait()
}

// stop asks the process to stop (stopSig, SIGTERM by default, to the group) and waits up to
// grace for it to exit, then kills it; it reports whether the process exited by itself.
func (p *proc) stop(grace time.Duration) bool {
	sig := p.stopSig
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	p.signal(sig)
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		// Children left in the group (none, for a well-behaved process) go too.
		p.signal(syscall.SIGKILL)
		return true
	case <-time.After(grace):
		p.kill()
		return false
	}
}

// wait blocks until the current run has ended.
func (p *proc) wait() {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
}

// exited reports whether the current run has ended (true if it never started).
func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done == nil || closed(p.done)
}

func (p *proc) waitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// pid is the process id of the current run, 0 if it does not run.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

func closed(ch chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// tail returns the last n lines of a log file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		// Temporal's JSON lines carry whole stack traces.
		if len(l) > 500 {
			lines[i] = l[:500] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

// errUnknown is returned for a process name the cluster does not have.
var errUnknown = errors.New("no such process")
