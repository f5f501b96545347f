//go:build linux

package builtin

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// TestEscapeUnixSockets: a process.run process reaches no host daemon through a named UNIX
// socket — Landlock does not govern connect(2) on one, so the init hides /run under an
// empty tmpfs in the call's own mount namespace: a socket the test listens on in /run, and
// PostgreSQL's where it runs on this host, are not there ("No such file or directory", a
// program failure, TOOL_FAILED). Each twin — a socket the program makes in its worktree or
// its $TMPDIR and connects to itself — works.
func TestEscapeUnixSockets(t *testing.T) {
	python := escapePython(t)
	if !initHooked.Load() || !pidNamespaces() {
		t.Skip("process.run has no init or no PID namespaces here (docs/tools.md)")
	}
	e := newEscapeEnv(t, nil)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	hostSock := filepath.Join("/run", "sw4rm-escape-"+hex.EncodeToString(b)+".sock")
	ln, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Skipf("cannot listen in /run here: %v", err)
	}
	t.Cleanup(func() { _ = ln.Close(); _ = os.Remove(hostSock) })
	var reached atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reached.Add(1)
			_ = c.Close()
		}
	}()
	// connect connects to the socket at path; listen makes one at path and connects to it.
	connect := func(path string) string {
		return python + ` -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + path + `")'`
	}
	self := func(path string) string {
		return python + ` -c 'import socket; l = socket.socket(socket.AF_UNIX); l.bind("` + path + `"); l.listen(1); s = socket.socket(socket.AF_UNIX); s.connect("` + path + `"); c, _ = l.accept(); s.send(b"x"); assert c.recv(1) == b"x"'`
	}
	notThere := func(a escapeAttempt) escapeAttempt {
		// The socket is hidden, not refused: connect fails ENOENT, a program failure, and the
		// message proves it.
		a.want, a.msg = tool.CodeToolFailed, "No such file or directory"
		return a
	}
	attempts := []escapeAttempt{
		notThere(e.attempt("connect to a host daemon's socket in /run", connect(hostSock), self("own.sock"))),
	}
	for _, pg := range []string{"/run/postgresql/.s.PGSQL.5432", "/var/run/postgresql/.s.PGSQL.5432"} {
		if fi, err := os.Stat(pg); err == nil && fi.Mode()&os.ModeSocket != 0 {
			attempts = append(attempts, notThere(e.attempt("connect to PostgreSQL's socket ("+pg+")", connect(pg), self(`" + __import__("os").environ["TMPDIR"] + "/pg.sock`))))
			break
		}
	}
	runEscapeSuite(t, "unix sockets", attempts)
	if n := reached.Load(); n != 0 {
		t.Errorf("the host's socket in /run was reached %d times", n)
	}
}
