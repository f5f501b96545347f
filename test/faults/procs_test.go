package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one child process of the suite, in a process group of its own so that a kill
// reaches everything it started.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string // path of its combined output
	done chan struct{}
	err  error // the wait result, valid after done
}

// startProc starts path with args and env in a new process group, output appended to
// logPath. The process is killed (SIGKILL to its group) when the test ends.
func startProc(t testing.TB, name, logPath string, env []string, path string, args ...string) *proc {
	t.Helper()
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s: open log: %v", name, err)
	}
	fmt.Fprintf(out, "---- %s start %s\n", name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("%s: start %s: %v", name, path, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL to the process group (kill -9) and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// pause stops the process group with SIGSTOP, as a machine that stalls (swapping, a frozen
// VM) stops a process: its connections stay open and nothing it was handed is processed
// until resume.
func (p *proc) pause() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGSTOP) }

// resume continues a paused process group (SIGCONT).
func (p *proc) resume() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGCONT) }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the last n lines of a log file, for failure messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// notable returns the last n warnings and errors of a log file (its plain tail if it has
// none), for failure messages. Rejections are left out: the scenarios provoke buffer_full by
// the hundred.
func notable(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "msg=message.rejected") {
			continue
		}
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "panic") || strings.HasPrefix(l, "---- ") {
			if len(l) > 400 {
				l = l[:400] + "…"
			}
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return tail(path, n)
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logContains reports whether the log file holds s after the last line starting with marker.
func logContains(path, marker, s string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	if i := bytes.LastIndex(b, []byte(marker)); i >= 0 {
		b = b[i:]
	}
	return bytes.Contains(b, []byte(s))
}

// portsMu keeps two helpers of one test from picking the same port between the probe and
// the bind.
var portsMu sync.Mutex

// freePorts returns n distinct free ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// listening reports whether something accepts TCP connections on addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// errTimeout is what waitFor reports when its condition never held.
var errTimeout = errors.New("condition not met before the deadline")

// waitFor polls cond every interval until it holds or timeout passes.
func waitFor(timeout, interval time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return waitCtx(ctx, interval, cond)
}

// waitCtx polls cond every interval until it holds or ctx ends.
func waitCtx(ctx context.Context, interval time.Duration, cond func() bool) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			if cond() {
				return nil
			}
			return errTimeout
		case <-t.C:
		}
	}
}

// cleanEnv is the suite's environment for child processes: the test's own, without any
// SW4RM_* variable a developer may have set, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SW4RM_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}
