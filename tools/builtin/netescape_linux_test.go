//go:build linux

package builtin

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sw4rm/sw4rm-temporal/protocol/tool"
	"github.com/sw4rm/sw4rm-temporal/tools"
)

// netHelperArg makes the test binary a network helper program inside process.run:
// "<binary> net-helper <command> <args>". Its exit codes: 0 it reached the target, 3 the
// network gave no way there (refused, unreachable), 4 the proxy refused it, 5 nothing reached
// it, 2 a bad command. It is a Go program, so the test needs no networking tool on the host.
const netHelperArg = "net-helper"

func init() {
	// Runs before TestMain: as a helper, the test binary does its command and exits.
	if len(os.Args) > 2 && os.Args[1] == netHelperArg {
		os.Exit(netHelper(os.Args[2], os.Args[3:]))
	}
}

func netHelper(cmd string, args []string) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", a...)
		return code
	}
	switch {
	case cmd == "direct" && len(args) == 1:
		c, err := net.DialTimeout("tcp", args[0], 3*time.Second)
		if err != nil {
			return fail(3, "direct: %v", err)
		}
		c.Close()
	case cmd == "connect" && len(args) == 1: // HTTP CONNECT through $HTTPS_PROXY
		u, err := url.Parse(os.Getenv("HTTPS_PROXY"))
		if err != nil || u.Host == "" {
			return fail(3, "connect: no HTTPS_PROXY in the environment")
		}
		c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
		if err != nil {
			return fail(3, "connect: the proxy: %v", err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", args[0], args[0])
		status, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.Contains(status, " 200 ") {
			rest, _ := io.ReadAll(io.LimitReader(c, 4096))
			return fail(4, "connect: the proxy answered %s%s", status, rest)
		}
	case cmd == "get" && len(args) == 1: // a plain http:// request through $HTTP_PROXY
		u, _ := url.Parse(os.Getenv("HTTP_PROXY"))
		if u == nil || u.Host == "" {
			return fail(3, "get: no HTTP_PROXY in the environment")
		}
		c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
		if err != nil {
			return fail(3, "get: the proxy: %v", err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", args[0], args[0])
		status, _ := bufio.NewReader(c).ReadString('\n')
		if !strings.Contains(status, " 200 ") {
			return fail(4, "get: the proxy answered %s", status)
		}
	case cmd == "socks" && len(args) == 1: // SOCKS5 through $ALL_PROXY, the target as a name
		u, _ := url.Parse(os.Getenv("ALL_PROXY"))
		if u == nil || u.Host == "" {
			return fail(3, "socks: no ALL_PROXY in the environment")
		}
		host, port, _ := net.SplitHostPort(args[0])
		n, _ := strconv.Atoi(port)
		c, err := net.DialTimeout("tcp", u.Host, 3*time.Second)
		if err != nil {
			return fail(3, "socks: the proxy: %v", err)
		}
		defer c.Close()
		req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
		req = append(append(req, host...), byte(n>>8), byte(n))
		if _, err := c.Write(req); err != nil {
			return fail(3, "socks: %v", err)
		}
		var reply [12]byte
		if _, err := io.ReadFull(c, reply[:]); err != nil {
			return fail(3, "socks: %v", err)
		}
		if reply[3] != 0 {
			return fail(4, "socks: the proxy answered code %d", reply[3])
		}
	case cmd == "listen" && len(args) == 1: // listen on the port and wait for a connection
		ln, err := net.Listen("tcp", "127.0.0.1:"+args[0])
		if err != nil {
			return fail(3, "listen: %v", err)
		}
		if err := os.WriteFile("listening", nil, 0o644); err != nil {
			return fail(3, "listen: %v", err)
		}
		_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(2 * time.Second))
		c, err := ln.Accept()
		if err != nil {
			return fail(5, "listen: nobody connected: %v", err)
		}
		c.Close()
	case cmd == "setns" && len(args) == 2: // join another process's network namespace, then dial
		f, err := os.Open("/proc/" + args[0] + "/ns/net")
		if err != nil {
			return fail(3, "setns: %v", err)
		}
		if _, _, e := syscall.RawSyscall(sysSetns[runtime.GOARCH], f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
			return fail(3, "setns: %v", e)
		}
		return netHelper("direct", args[1:])
	default:
		return fail(2, "unknown net-helper command %s %v", cmd, args)
	}
	fmt.Println("reached")
	return 0
}

// sysSetns is setns(2)'s number, which the syscall package lacks on some architectures.
var sysSetns = map[string]uintptr{"amd64": 308, "arm64": 268, "386": 346, "riscv64": 268, "loong64": 268}

// countingListener stands for a service on the host's loopback (PostgreSQL, Temporal,
// another service): it counts the connections it accepts and answers HTTP 200.
type countingListener struct {
	ln net.Listener
	mu sync.Mutex
	n  int
}

func listenLoopback(t *testing.T, addr string) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	l := &countingListener{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.n++
			l.mu.Unlock()
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 512)
				n, _ := c.Read(buf)
				if strings.HasPrefix(string(buf[:n]), "GET ") {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				}
			}()
		}
	}()
	return l
}

func (l *countingListener) addr() string { return l.ln.Addr().String() }

func (l *countingListener) port() string {
	_, p, _ := net.SplitHostPort(l.addr())
	return p
}

func (l *countingListener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// freePort is a loopback port nothing listens on at the time of the call.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// netAttempt is one escape attempt, or its legitimate twin: a process.run call under a
// network policy, the §18.3 code it must end with ("" = success), and what must (not) have
// been reached.
type netAttempt struct {
	name    string
	policy  tool.NetworkPolicy
	allow   string // the provider's egress allowlist
	argv    []string
	code    tool.Code
	want    string // in the error message
	reached *countingListener
	// before and after run around the call (e.g. connect to what the process listens on).
	during func(t *testing.T, wt string) error
}

// TestNetworkEscapes runs the network escape attempts from inside process.run, each with a
// legitimate twin that must still work, and prints the figure.
func TestNetworkEscapes(t *testing.T) {
	if !initHooked.Load() || !pidNamespaces() {
		t.Skip("process.run has no init or no PID namespaces here; the proxied policies are refused (TestNetworkWithoutInit)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := func(args ...string) []string { return append([]string{self, netHelperArg}, args...) }
	postgres := listenLoopback(t, "127.0.0.1:0") // stands for PostgreSQL
	temporal := listenLoopback(t, "127.0.0.1:0") // stands for Temporal
	other := listenLoopback(t, "127.0.0.1:0")    // another loopback service
	allowed := listenLoopback(t, "127.0.0.1:0")  // the one the allowlist names
	second := listenLoopback(t, "127.0.0.2:0")   // a host not in the allowlist
	allowList := allowed.addr()
	ownPid := strconv.Itoa(os.Getpid())
	inPort := freePort(t)
	dialIn := func(t *testing.T, wt string) error {
		// Wait for the process to listen, then try to reach it from outside.
		for i := 0; i < 100; i++ {
			if _, err := os.Stat(filepath.Join(wt, "listening")); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+inPort, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}

	// ownListener is a twin's command: the process listens on inPort inside its own
	// namespace and dials it through host.
	ownListener := func(host string) []string {
		return []string{"sh", "-c", fmt.Sprintf("%s %s listen %s & sleep 0.3; %s %s direct %s:%s; wait", self, netHelperArg, inPort, self, netHelperArg, host, inPort)}
	}
	// Each escape attempt with its legitimate twin: the same action on an allowed resource,
	// or the allowed resource by the same path.
	pairs := [][2]netAttempt{ // the escape, its twin
		{
			{name: "EGRESS_UNRESTRICTED: PostgreSQL's port on the host's loopback, ignoring the proxy", policy: tool.NetworkEgressUnrestricted,
				argv: helper("direct", postgres.addr()), code: tool.CodeToolFailed, want: "exited with code 3", reached: postgres},
			{name: "EGRESS_UNRESTRICTED: the process's own listener inside its namespace", policy: tool.NetworkEgressUnrestricted,
				argv: []string{"sh", "-c", fmt.Sprintf("%s %s listen %s & sleep 0.3; %s %s direct 127.0.0.1:%s; wait", self, netHelperArg, inPort, self, netHelperArg, inPort)}},
		},
		{
			{name: "EGRESS_UNRESTRICTED: PostgreSQL's port through the proxy (CONNECT)", policy: tool.NetworkEgressUnrestricted,
				argv: helper("connect", postgres.addr()), code: tool.CodePermissionDenied, want: "a loopback address of the host", reached: postgres},
			{name: "EGRESS_RESTRICTED: the allowlisted loopback service through the proxy (CONNECT)", policy: tool.NetworkEgressRestricted, allow: allowList,
				argv: helper("connect", allowed.addr()), reached: allowed},
		},
		{
			{name: "EGRESS_UNRESTRICTED: Temporal's port through the proxy (SOCKS5)", policy: tool.NetworkEgressUnrestricted,
				argv: helper("socks", temporal.addr()), code: tool.CodePermissionDenied, want: "a loopback address of the host", reached: temporal},
			{name: "EGRESS_RESTRICTED: the allowlisted loopback service through the proxy (SOCKS5)", policy: tool.NetworkEgressRestricted, allow: allowList,
				argv: helper("socks", allowed.addr()), reached: allowed},
		},
		{
			{name: "EGRESS_UNRESTRICTED: Temporal's port as localhost through the proxy (a name for loopback)", policy: tool.NetworkEgressUnrestricted,
				argv: helper("socks", "localhost:"+temporal.port()), code: tool.CodePermissionDenied, want: "loopback", reached: temporal},
			{name: "EGRESS_UNRESTRICTED: the process's own listener by the name localhost inside its namespace", policy: tool.NetworkEgressUnrestricted,
				argv: ownListener("localhost")},
		},
		{
			{name: "EGRESS_UNRESTRICTED: another loopback service by plain http:// through the proxy", policy: tool.NetworkEgressUnrestricted,
				argv: helper("get", other.addr()), code: tool.CodePermissionDenied, want: "a loopback address of the host", reached: other},
			{name: "EGRESS_RESTRICTED: the allowlisted loopback service by plain http://", policy: tool.NetworkEgressRestricted, allow: allowList,
				argv: helper("get", allowed.addr()), reached: allowed},
		},
		{
			{name: "EGRESS_UNRESTRICTED: the host through 0.0.0.0", policy: tool.NetworkEgressUnrestricted,
				argv: helper("connect", "0.0.0.0:"+other.port()), code: tool.CodePermissionDenied, want: "unspecified", reached: other},
			{name: "EGRESS_UNRESTRICTED: the process's own listener through 0.0.0.0 inside its namespace", policy: tool.NetworkEgressUnrestricted,
				argv: ownListener("0.0.0.0")},
		},
		{
			{name: "EGRESS_UNRESTRICTED: the host through an IPv4-mapped IPv6 loopback", policy: tool.NetworkEgressUnrestricted,
				argv: helper("connect", "[::ffff:127.0.0.1]:"+other.port()), code: tool.CodePermissionDenied, want: "loopback", reached: other},
			{name: "EGRESS_UNRESTRICTED: the process's own listener through an IPv4-mapped IPv6 loopback inside its namespace", policy: tool.NetworkEgressUnrestricted,
				argv: ownListener("[::ffff:127.0.0.1]")},
		},
		{
			{name: "EGRESS_UNRESTRICTED: join the worker's network namespace (setns)", policy: tool.NetworkEgressUnrestricted,
				argv: helper("setns", ownPid, postgres.addr()), code: tool.CodeToolFailed, want: "exited with code 3", reached: postgres},
			{name: "EGRESS_UNRESTRICTED: the process's own network namespace (/proc/self/ns/net)", policy: tool.NetworkEgressUnrestricted,
				argv: []string{"sh", "-c", "readlink /proc/self/ns/net | grep -q '^net:'"}},
		},
		{
			{name: "EGRESS_RESTRICTED: a host not in the allowlist", policy: tool.NetworkEgressRestricted, allow: allowList,
				argv: helper("connect", second.addr()), code: tool.CodePermissionDenied, want: "not in the egress allowlist", reached: second},
			{name: "EGRESS_RESTRICTED: a second loopback address, once allowlisted", policy: tool.NetworkEgressRestricted, allow: allowList + "," + second.addr(),
				argv: helper("connect", second.addr()), reached: second},
		},
		{
			{name: "EGRESS_RESTRICTED: the allowlisted host on another port (PostgreSQL's)", policy: tool.NetworkEgressRestricted, allow: allowList,
				argv: helper("socks", postgres.addr()), code: tool.CodePermissionDenied, want: "not in the egress allowlist", reached: postgres},
			{name: "EGRESS_RESTRICTED: PostgreSQL's port once allowlisted (SOCKS5)", policy: tool.NetworkEgressRestricted, allow: allowList + "," + postgres.addr(),
				argv: helper("socks", postgres.addr()), reached: postgres},
		},
		{
			{name: "EGRESS_RESTRICTED: the allowlisted address by a name that resolves to it", policy: tool.NetworkEgressRestricted, allow: allowList + ",localhost:" + allowed.port(),
				argv: helper("socks", "localhost:"+allowed.port()), code: tool.CodePermissionDenied, want: "loopback", reached: allowed},
			{name: "EGRESS_RESTRICTED: the allowlisted address by its address, the name allowlisted too (SOCKS5)", policy: tool.NetworkEgressRestricted, allow: allowList + ",localhost:" + allowed.port(),
				argv: helper("socks", allowed.addr()), reached: allowed},
		},
		{
			{name: "EGRESS_RESTRICTED: the allowlisted host, ignoring the proxy", policy: tool.NetworkEgressRestricted, allow: allowList,
				argv: helper("direct", allowed.addr()), code: tool.CodeToolFailed, want: "exited with code 3", reached: allowed},
			{name: "FULL_ACCESS: the allowlisted host, directly", policy: tool.NetworkFullAccess,
				argv: helper("direct", allowed.addr()), reached: allowed},
		},
		{
			{name: "EGRESS_UNRESTRICTED: listen on a port and be reached from outside", policy: tool.NetworkEgressUnrestricted,
				argv: helper("listen", inPort), code: tool.CodeToolFailed, want: "exited with code 5", during: dialIn},
			{name: "FULL_ACCESS: listen on a port and be reached from outside", policy: tool.NetworkFullAccess,
				argv: helper("listen", inPort), during: dialIn},
		},
		{
			{name: "DENY_ALL: PostgreSQL's port on the host's loopback", policy: tool.NetworkDenyAll,
				argv: helper("direct", postgres.addr()), code: tool.CodeToolFailed, want: "exited with code 3", reached: postgres},
			{name: "FULL_ACCESS: PostgreSQL's port on the host's loopback", policy: tool.NetworkFullAccess,
				argv: helper("direct", postgres.addr()), reached: postgres},
		},
		{
			{name: "DENY_ALL: the proxy address of the proxied policies", policy: tool.NetworkDenyAll,
				argv: helper("direct", EgressProxyAddr), code: tool.CodeToolFailed, want: "exited with code 3"},
			{name: "EGRESS_UNRESTRICTED: the proxy address, in the proxied namespace", policy: tool.NetworkEgressUnrestricted,
				argv: helper("direct", EgressProxyAddr)},
		},
		{
			{name: "DENY_ALL: join the worker's network namespace (setns)", policy: tool.NetworkDenyAll,
				argv: helper("setns", ownPid, postgres.addr()), code: tool.CodeToolFailed, want: "exited with code 3", reached: postgres},
			{name: "DENY_ALL: only lo, and no proxy in the environment", policy: tool.NetworkDenyAll,
				argv: []string{"sh", "-c", `test -z "$HTTPS_PROXY$https_proxy$ALL_PROXY" && test "$(grep -c : /proc/net/dev)" = 1 && grep -q '^ *lo:' /proc/net/dev`}},
		},
	}

	refused, passed := 0, 0
	for _, pr := range pairs {
		if runNetAttempt(t, pr[0]) {
			refused++
		}
		if runNetAttempt(t, pr[1]) {
			passed++
		}
	}
	fmt.Printf("network escapes: %d attempts, %d refused, %d twins passed\n", len(pairs), refused, passed)
	escapeTotal.add(len(pairs), refused, passed)
	if refused != len(pairs) || passed != len(pairs) {
		t.Errorf("network escapes: %d of %d refused, %d of %d twins passed", refused, len(pairs), passed, len(pairs))
	}
}

// runNetAttempt runs one attempt and reports whether it ended as it must.
func runNetAttempt(t *testing.T, a netAttempt) bool {
	ok := true
	t.Run(a.name, func(t *testing.T) {
		rules, err := ParseEgressAllow(a.allow)
		if err != nil {
			t.Fatal(err)
		}
		p := New(Options{EgressAllow: rules})
		wt := t.TempDir()
		before := 0
		if a.reached != nil {
			before = a.reached.count()
		}
		var duringErr error
		var wg sync.WaitGroup
		if a.during != nil {
			wg.Go(func() { duringErr = a.during(t, wt) })
		}
		rec := &recorder{}
		_, err = run(context.Background(), p, wt, rec, func(r *tools.Request) { r.Policy.Network = a.policy }, a.argv...)
		wg.Wait()
		defer func() { ok = !t.Failed() }()
		if a.code == "" {
			if err != nil {
				t.Fatalf("the twin failed: %v", err)
			}
			if a.reached != nil && a.reached.count() == before {
				t.Errorf("the twin reached nothing")
			}
			if a.during != nil && duringErr != nil {
				t.Errorf("the twin was not reachable from outside: %v", duringErr)
			}
			return
		}
		if tool.CodeOf(err) != a.code || !strings.Contains(fmt.Sprint(err), a.want) {
			t.Errorf("error = %v, want %s containing %q; stdout %q", err, a.code, a.want, output(rec.all(), ContentTypeStdout))
		}
		if a.reached != nil && a.reached.count() != before {
			t.Errorf("the escape reached its target")
		}
		if a.during != nil && duringErr == nil {
			t.Errorf("the process's listener was reached from outside")
		}
	})
	return ok
}

// TestEgressProxyDecide: the allow logic, without connecting anywhere.
func TestEgressProxyDecide(t *testing.T) {
	rules, err := ParseEgressAllow(" api.example.com:443, *.pkg.example.org:*, 10.1.2.3:5432, [2001:db8::1]:80 ,127.0.0.1:9000")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(rules); got != "[api.example.com:443 *.pkg.example.org:* 10.1.2.3:5432 [2001:db8::1]:80 127.0.0.1:9000]" {
		t.Errorf("rules = %s", got)
	}
	p := newEgressProxy(true, rules)
	for _, tt := range []struct {
		host string
		port int
		ok   bool
	}{
		{"api.example.com", 443, true},
		{"api.example.com", 80, false},
		{"evil.api.example.com", 443, false},
		{"a.pkg.example.org", 8443, true},
		{"pkg.example.org", 443, false}, // "*." is below the domain, not the domain
		{"10.1.2.3", 5432, true},
		{"10.1.2.4", 5432, false},
		{"2001:db8::1", 80, true},
		{"127.0.0.1", 9000, true},
		{"127.0.0.1", 9001, false},
		{"api.example.com", 0, false},
		{"", 443, false},
	} {
		_, err := p.decide(tt.host, tt.port)
		if (err == nil) != tt.ok {
			t.Errorf("decide(%s, %d) = %v, want allowed %v", tt.host, tt.port, err, tt.ok)
		}
	}
	if n := len(p.refused()); n == 0 || n > maxRefusalsKept {
		t.Errorf("refused() kept %d", n)
	}
	if _, err := newEgressProxy(false, nil).decide("anything.example", 1); err != nil {
		t.Errorf("unrestricted decide = %v", err)
	}

	for _, bad := range []string{"example.com", "example.com:0", "example.com:65536", "exa mple.com:80", "-x.com:80", "[fe80::1%eth0]:80", "*:80", "a..b:80"} {
		if _, err := ParseEgressAllow(bad); err == nil {
			t.Errorf("ParseEgressAllow(%q) accepted", bad)
		}
	}
	if r, err := ParseEgressAllow(" , "); err != nil || len(r) != 0 {
		t.Errorf("an empty list = %v, %v", r, err)
	}
}

// TestEgressProxyForbidden: the addresses the proxy never connects to unless an entry names
// them literally — checked without connecting.
func TestEgressProxyForbidden(t *testing.T) {
	own := netip.MustParseAddr("192.0.2.10") // stands for an address of the host's interfaces
	p := newEgressProxy(false, nil)
	p.ownAddrs = func() ([]netip.Prefix, error) { return []netip.Prefix{netip.PrefixFrom(own, 24)}, nil }
	for _, tt := range []struct {
		addr, why string
	}{
		{"127.0.0.1", "loopback"}, {"127.9.9.9", "loopback"}, {"::1", "loopback"}, {"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unspecified"}, {"::", "unspecified"},
		{"169.254.169.254", "link-local"}, {"fe80::1", "link-local"},
		{"239.1.2.3", "multicast"}, {"224.0.0.1", "link-local"}, {"255.255.255.255", "broadcast"},
		{"192.0.2.10", "the host's own"},
		{"192.0.2.11", ""}, {"198.51.100.7", ""}, {"2001:db8::7", ""},
	} {
		why := p.forbidden(netip.MustParseAddr(tt.addr))
		if (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) {
			t.Errorf("forbidden(%s) = %q, want %q", tt.addr, why, tt.why)
		}
	}
	p.ownAddrs = func() ([]netip.Prefix, error) { return nil, fmt.Errorf("no interfaces") }
	if why := p.forbidden(netip.MustParseAddr("198.51.100.7")); !strings.Contains(why, "cannot be listed") {
		t.Errorf("with the host's addresses unknown, forbidden = %q; it must refuse", why)
	}

	// A name is checked on what it resolves to: one that resolves to loopback reaches
	// nothing, even when the allowlist names it — the resolver here is the test's, and
	// the refusal comes before any connection.
	rules, _ := ParseEgressAllow("db.example.com:5432")
	r := newEgressProxy(true, rules)
	r.resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	if _, err := r.dial(context.Background(), "DB.example.com.", 5432); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("a name resolving to loopback: %v", err)
	}
}

// TestEgressProxySocksAndHTTPRefusals: the proxy's answers on the wire, over an in-memory
// pipe: SOCKS5 code 2 and HTTP 403 for a refusal, 400 for what it does not serve.
func TestEgressProxySocksAndHTTPRefusals(t *testing.T) {
	p := newEgressProxy(true, nil)
	exchange := func(req []byte, n int) []byte {
		c, s := net.Pipe()
		defer c.Close()
		go p.handle(context.Background(), s)
		go func() { _, _ = c.Write(req) }()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 0, 512)
		buf := make([]byte, 512)
		for len(b) < n {
			k, err := c.Read(buf)
			b = append(b, buf[:k]...)
			if err != nil {
				break
			}
		}
		return b
	}
	port := make([]byte, 2)
	binary.BigEndian.PutUint16(port, 443)
	socks := append([]byte{5, 1, 0, 5, 1, 0, 1, 198, 51, 100, 7}, port...)
	if got := exchange(socks, 12); len(got) < 4 || got[1] != 0 || got[3] != socksNotAllowed {
		t.Errorf("SOCKS5 refusal = %v, want reply code %d", got, socksNotAllowed)
	}
	if got := exchange([]byte{5, 1, 2}, 2); len(got) < 2 || got[1] != socksNoAcceptable {
		t.Errorf("SOCKS5 without no-auth = %v", got)
	}
	if got := string(exchange([]byte("CONNECT 198.51.100.7:443 HTTP/1.1\r\nHost: x\r\n\r\n"), 200)); !strings.HasPrefix(got, "HTTP/1.1 403 ") || !strings.Contains(got, "not in the egress allowlist") {
		t.Errorf("CONNECT refusal = %q", got)
	}
	if got := string(exchange([]byte("GET /local HTTP/1.1\r\nHost: x\r\n\r\n"), 100)); !strings.HasPrefix(got, "HTTP/1.1 400 ") {
		t.Errorf("an origin-form request = %q", got)
	}
}

// TestNetworkWithoutInit: without the init, the proxied policies are refused rather than run
// with another network; EGRESS_RESTRICTED with an empty allowlist is refused before
// anything starts.
func TestNetworkWithoutInit(t *testing.T) {
	wt := t.TempDir()
	marker := filepath.Join(wt, "ran")
	_, err := run(context.Background(), New(Options{}), wt, nil, func(r *tools.Request) { r.Policy.Network = tool.NetworkEgressRestricted }, "touch", marker)
	wantCode(t, err, tool.CodePermissionDenied, "SW4RM_TOOL_EGRESS_ALLOW")
	hooked := initHooked.Load()
	initHooked.Store(false)
	defer initHooked.Store(hooked)
	_, err = run(context.Background(), New(Options{}), wt, nil, func(r *tools.Request) { r.Policy.Network = tool.NetworkEgressUnrestricted }, "touch", marker)
	wantCode(t, err, tool.CodePermissionDenied, "init process")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused call ran its process")
	}
}
