//go:build linux

package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/sw4rm/sw4rm-temporal/confine/sandbox"
	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
)

// initNetArg, before initArg in the init's arguments as "__sw4rm-tool-net <fd>", asks the
// init to set up the proxy front of its network namespace first (netInitIfAsked).
const initNetArg = "__sw4rm-tool-net"

// EgressProxyAddr is where a process under EGRESS_RESTRICTED or EGRESS_UNRESTRICTED finds
// the provider's proxy, inside its own network namespace: HTTP_PROXY, HTTPS_PROXY and
// ALL_PROXY name it. The namespace is the call's alone, so the port is always free.
const EgressProxyAddr = "127.0.0.1:3128"

// netSetupFailed is the init's exit code when it could not set up the proxy front; the
// program was not started.
const netSetupFailed = 125

// capNetAdmin is CAP_NET_ADMIN, which bringing up the namespace's loopback needs.
const capNetAdmin = 12

// Linux constants the syscall package lacks.
const (
	prCapAmbient         = 47 // PR_CAP_AMBIENT
	prCapAmbientClearAll = 4  // PR_CAP_AMBIENT_CLEAR_ALL
)

// proxyEnv is what a proxied process finds in its environment: the usual variables, in
// both cases, since tools read one or the other.
func proxyEnv() []string {
	httpURL, socksURL := "http://"+EgressProxyAddr, "socks5h://"+EgressProxyAddr
	var env []string
	for _, kv := range [][2]string{{"HTTP_PROXY", httpURL}, {"HTTPS_PROXY", httpURL}, {"ALL_PROXY", socksURL}} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return env
}

// attach prepares cmd, already under its init (dieWithWorker), for the plan. Every
// namespace gets a user namespace of its own — even when the server is root, with root
// mapped to itself — so that the process holds no capability over the host's network
// namespace and cannot join it (setns through /proc/<pid>/ns/net). A proxied namespace also
// needs the init, which sets up the proxy's front inside it: without the init
// (RunInitIfAsked not called, or no PID namespaces) the call is refused rather than run with
// a network its policy does not name.
func (n *netPlan) attach(cmd *exec.Cmd) error {
	if !n.isolate {
		return nil
	}
	attr := cmd.SysProcAttr
	sandbox.MappedUserNamespace(attr)
	if n.proxy == nil {
		return nil
	}
	if len(cmd.Args) < 3 || cmd.Args[1] != initArg {
		return fmt.Errorf("network_policy %s needs the provider's init process in the call's namespace (builtin.RunInitIfAsked first in main, and PID namespaces), and this server has none", n.policy)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	n.parent = os.NewFile(uintptr(fds[0]), "egress-proxy")
	child := os.NewFile(uintptr(fds[1]), "egress-proxy-init")
	cmd.ExtraFiles = append(cmd.ExtraFiles, child)
	fd := 2 + len(cmd.ExtraFiles) // ExtraFiles[i] is fd 3+i in the init
	cmd.Args = append([]string{cmd.Args[0], initNetArg, strconv.Itoa(fd)}, cmd.Args[1:]...)
	if os.Geteuid() != 0 {
		// The init is not root in its user namespace, so it keeps CAP_NET_ADMIN across its
		// exec only as an ambient capability; it drops it before it starts the program.
		attr.AmbientCaps = append(attr.AmbientCaps, capNetAdmin)
	}
	cmd.Env = append(cmd.Env, proxyEnv()...)
	return nil
}

// start, once the init started, receives the listener of the proxy's front from the init
// and serves it until ctx ends. The init sends it before it starts the program; if the
// init ends without sending it, the front could not be set up (finish reports why).
func (n *netPlan) start(ctx context.Context) {
	if n.proxy == nil || n.parent == nil {
		return
	}
	n.started, n.done = true, make(chan struct{})
	go func() {
		defer close(n.done)
		ln, err := receiveListener(n.parent)
		if err != nil {
			n.setup = err
			return
		}
		defer ln.Close()
		n.proxy.serve(ctx, ln)
	}()
}

// close waits for the proxy to end (its context ended with the run) and releases the
// socket pair.
func (n *netPlan) close() {
	if n.started {
		<-n.done
	}
	if n.parent != nil {
		_ = n.parent.Close()
		n.parent = nil
	}
}

// receiveListener reads the listening socket the init sends over the socket pair.
func receiveListener(f *os.File) (net.Listener, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("the socket pair is a %T", c)
	}
	// Far more than the init needs to get to sending it.
	_ = uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(b, oob)
	if (err == nil || errors.Is(err, io.EOF)) && n == 0 && oobn == 0 {
		return nil, errors.New("the init ended before it handed over the proxy's listener (its stderr says why)")
	}
	if err != nil {
		return nil, err
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, fmt.Errorf("the init sent no listener (%v)", err)
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, fmt.Errorf("the init sent no listener (%v)", err)
	}
	lf := os.NewFile(uintptr(fds[0]), "egress-proxy-listener")
	defer lf.Close()
	return net.FileListener(lf)
}

// netInitIfAsked runs first in RunInitIfAsked: started as "<self> __sw4rm-tool-net <fd>
// <init arguments>", the init sets up the proxy front of its network namespace (frontInNamespace)
// and goes on as the plain init; it exits netSetupFailed when it cannot, before the program
// starts.
func netInitIfAsked() {
	if len(os.Args) < 4 || os.Args[1] != initNetArg {
		return
	}
	fd, err := strconv.Atoi(os.Args[2])
	if err == nil {
		err = frontInNamespace(fd)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sw4rm init: cannot set up the egress proxy in the network namespace: %v\n", err)
		os.Exit(netSetupFailed)
	}
	os.Args = append(os.Args[:1:1], os.Args[3:]...)
}

// frontInNamespace brings up the namespace's loopback, listens on EgressProxyAddr, hands
// the listening socket to the worker over the socket pair fd, and keeps no copy: the
// worker's proxy accepts the process's connections itself. The goroutine stays locked to
// its thread, whose ambient capabilities are cleared: the init starts the program from it
// (Go forks from the calling thread), so the program gets no capability.
func frontInNamespace(fd int) error {
	runtime.LockOSThread()
	defer func() { _ = syscall.Close(fd) }()
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = syscall.Close(lfd) }()
	addr, err := net.ResolveTCPAddr("tcp", EgressProxyAddr)
	if err != nil {
		return err
	}
	sa := &syscall.SockaddrInet4{Port: addr.Port}
	copy(sa.Addr[:], addr.IP.To4())
	if err := syscall.Bind(lfd, sa); err != nil {
		return fmt.Errorf("bind %s: %w", EgressProxyAddr, err)
	}
	if err := syscall.Listen(lfd, 128); err != nil {
		return err
	}
	if err := syscall.Sendmsg(fd, []byte{1}, syscall.UnixRights(lfd), nil, 0); err != nil {
		return fmt.Errorf("handing over the listener: %w", err)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0); e != 0 && e != syscall.EINVAL {
		return fmt.Errorf("dropping the ambient capabilities: %w", e)
	}
	return nil
}

// loopbackUp sets the flag IFF_UP on lo, which gives it 127.0.0.1 and ::1.
func loopbackUp() error {
	s, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = syscall.Close(s) }()
	var ifr struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [24]byte
	}
	copy(ifr.name[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	ifr.flags |= syscall.IFF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	return nil
}

// attachError maps a plan that cannot be attached: PERMISSION_DENIED, nothing started.
func attachError(name, program string, err error) error {
	return tool.Errorf(tool.CodePermissionDenied, "tool %q: %q was not started: %v", name, program, err)
}
