//go:build linux

package builtin

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
)

// initArg, as the first argument of the server's own executable, makes it the init process of
// a process.run call (RunInitIfAsked).
const initArg = "__sw4rm-tool-init"

// initHooked reports that this executable calls RunInitIfAsked, so that the provider may
// start processes through it.
var initHooked atomic.Bool

// RunInitIfAsked makes the built-in provider's processes die with their worker: call it first
// in main, and in TestMain of tests that run process.run in-process. When this process was
// started as the init process of a call, it runs the call's program and exits with its
// status; otherwise it returns at once, and from then on the provider starts each process
// as the first of a new PID namespace through this executable — so that when the worker
// dies, even by SIGKILL, the kernel ends every process the call started (docs/tools.md).
func RunInitIfAsked() {
	netInitIfAsked() // a proxied network namespace's front first (netns_linux.go)
	if len(os.Args) > 3 && os.Args[1] == initArg {
		os.Exit(runInit(os.Args[2], os.Args[3:]))
	}
	initHooked.Store(true)
	sandbox.SetHooked() // the sandbox may start its programs through this init (confine/sandbox)
}

// runInit is PID 1 of a call's namespace: it starts the program (path, with argv), passes on
// the signals it gets, reaps every orphan, and exits with the program's exit code. A program
// killed by a signal is reported on file descriptor 3, since the namespace's init cannot die
// of a signal of its own; the exit code is then 128 + the signal's number, like a shell's.
// When it exits the kernel ends whatever is left in the namespace.
func runInit(path string, argv []string) int {
	if err := sandbox.ApplyFromEnv(); err != nil { // Landlock and resource limits, before the program
		fmt.Fprintf(os.Stderr, "sw4rm sandbox: %v\n", err)
		return 126
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	child, err := os.StartProcess(path, argv, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot start %s: %v\n", argv[0], err)
		return 127
	}
	go func() {
		for s := range sigs {
			_ = child.Signal(s)
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 127
		}
		if pid != child.Pid {
			continue // an orphan of the program's, reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			if report := os.NewFile(3, "signal-report"); report != nil {
				_, _ = fmt.Fprintf(report, "%d", int(ws.Signal()))
				_ = report.Close()
			}
			return 128 + int(ws.Signal())
		}
	}
}
