package builtin

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EgressRule is one entry of an egress allowlist (§18.5.2 EGRESS_RESTRICTED): a host and a
// port a process may connect to through the provider's proxy.
type EgressRule struct {
	// Host is a lower-case DNS name, "*." and a domain (any name below it, not the domain
	// itself), or an IP address literal. Only a literal address allows an address the proxy
	// otherwise refuses (loopback, link-local, the host's own): a name never does, whatever
	// it resolves to.
	Host string
	// Port is the port, 1–65535; 0 means any port.
	Port int
	// addr is Host parsed, when Host is an IP literal.
	addr netip.Addr
}

// String is the rule as it is written in the allowlist: host:port, [v6]:port, host:*.
func (r EgressRule) String() string {
	port := "*"
	if r.Port != 0 {
		port = strconv.Itoa(r.Port)
	}
	return net.JoinHostPort(r.Host, port)
}

// ParseEgressAllow parses an egress allowlist: host:port entries separated by commas, where
// host is a DNS name, "*.domain", an IPv4 address or an IPv6 address in brackets, and port
// a number or "*". An empty list allows nothing. Names are compared case-insensitively.
func ParseEgressAllow(s string) ([]EgressRule, error) {
	var rules []EgressRule
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		host, port, err := net.SplitHostPort(entry)
		if err != nil {
			return nil, fmt.Errorf("egress allowlist entry %q is not host:port: %v", entry, err)
		}
		r := EgressRule{Host: strings.ToLower(host)}
		if port != "*" {
			n, err := strconv.Atoi(port)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("egress allowlist entry %q: port %q is not 1–65535 or *", entry, port)
			}
			r.Port = n
		}
		if a, err := netip.ParseAddr(host); err == nil {
			if a.Zone() != "" {
				return nil, fmt.Errorf("egress allowlist entry %q: an address with a zone is not accepted", entry)
			}
			r.addr = a.Unmap()
			r.Host = r.addr.String()
		} else if !validHostPattern(r.Host) {
			return nil, fmt.Errorf("egress allowlist entry %q: %q is neither an IP address nor a DNS name (\"*.\" may start one)", entry, host)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// validHostPattern reports whether h is a DNS name, optionally starting with "*.".
func validHostPattern(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// matches reports whether the rule allows host (lower-case name or canonical address) and
// port.
func (r EgressRule) matches(host string, port int) bool {
	if r.Port != 0 && r.Port != port {
		return false
	}
	if suffix, ok := strings.CutPrefix(r.Host, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return r.Host == host
}

// errEgressRefused marks a connection the proxy refused by policy, as opposed to one it
// could not make.
var errEgressRefused = errors.New("refused by the egress policy")

// egressProxy is the only way out of a process's network namespace under EGRESS_RESTRICTED
// and EGRESS_UNRESTRICTED: the process connects to its front in the namespace (HTTP CONNECT,
// plain HTTP with an absolute URL, or SOCKS5), and the proxy, running in the worker outside
// the namespace, connects to the target when the policy allows it. It never connects to a
// loopback, unspecified, link-local or multicast address, nor to one of the host's own
// addresses (PostgreSQL, Temporal and the server itself listen there), unless an allowlist
// entry names that address literally.
type egressProxy struct {
	// restricted: only targets matching rules are allowed (EGRESS_RESTRICTED).
	restricted bool
	rules      []EgressRule
	// ownAddrs lists the host's own addresses; nil: net.InterfaceAddrs.
	ownAddrs func() ([]netip.Prefix, error)
	// resolve looks up a name; nil: the default resolver.
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// handshake bounds reading a client's request.
	handshake time.Duration

	mu       sync.Mutex
	refusals []string // "host:port: why", the first maxRefusalsKept
	conns    sync.WaitGroup
}

// maxRefusalsKept bounds the refusals a call's error message names.
const maxRefusalsKept = 8

// newEgressProxy returns the proxy of one call: with restricted, only the rules' targets.
func newEgressProxy(restricted bool, rules []EgressRule) *egressProxy {
	return &egressProxy{restricted: restricted, rules: rules, handshake: 10 * time.Second}
}

// refused lists what the proxy refused so far.
func (p *egressProxy) refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refusals...)
}

func (p *egressProxy) refuse(target, why string) error {
	p.mu.Lock()
	if len(p.refusals) < maxRefusalsKept {
		p.refusals = append(p.refusals, target+": "+why)
	}
	p.mu.Unlock()
	return fmt.Errorf("%w: %s: %s", errEgressRefused, target, why)
}

// decide is the name-level decision for host (a name or an address) and port: the rule
// that allows it (nil under EGRESS_UNRESTRICTED), or a refusal.
func (p *egressProxy) decide(host string, port int) (*EgressRule, error) {
	target := net.JoinHostPort(host, strconv.Itoa(port))
	if port < 1 || port > 65535 {
		return nil, p.refuse(target, "no such port")
	}
	if host == "" {
		return nil, p.refuse(target, "no host")
	}
	if !p.restricted {
		return nil, nil
	}
	for i := range p.rules {
		if p.rules[i].matches(host, port) {
			return &p.rules[i], nil
		}
	}
	return nil, p.refuse(target, "not in the egress allowlist (network_policy EGRESS_RESTRICTED)")
}

// forbidden says why a connection to a may not be made unless an allowlist entry names a
// literally; "" when it may.
func (p *egressProxy) forbidden(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case a.IsLoopback():
		return "a loopback address of the host"
	case a.IsUnspecified():
		return "the unspecified address, which reaches the host itself"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "a link-local address"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "a multicast address"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "the broadcast address"
	}
	own := p.ownAddrs
	if own == nil {
		own = interfacePrefixes
	}
	prefixes, err := own()
	if err != nil {
		return "the host's own addresses cannot be listed (" + err.Error() + ")"
	}
	for _, pf := range prefixes {
		if pf.Addr().Unmap() == a {
			return "one of the host's own addresses"
		}
	}
	return ""
}

// interfacePrefixes lists the host's own addresses.
func interfacePrefixes() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				ones, _ := n.Mask.Size()
				out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
			}
		}
	}
	return out, nil
}

// dial connects to host:port when the policy allows it. Every address the dialer tries —
// those a name resolves to included — is checked as the socket connects, so a name that
// resolves to the host's loopback reaches nothing.
func (p *egressProxy) dial(ctx context.Context, host string, port int) (net.Conn, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(host); err == nil {
		host = a.Unmap().String()
	}
	rule, err := p.decide(host, port)
	if err != nil {
		return nil, err
	}
	target := net.JoinHostPort(host, strconv.Itoa(port))
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		resolve := p.resolve
		if resolve == nil {
			resolve = func(ctx context.Context, h string) ([]netip.Addr, error) {
				return net.DefaultResolver.LookupNetIP(ctx, "ip", h)
			}
		}
		if addrs, err = resolve(ctx, host); err != nil {
			return nil, fmt.Errorf("%s: %v", target, err)
		}
	}
	var last error
	for _, a := range addrs {
		a = a.Unmap()
		if why := p.forbidden(a); why != "" && (rule == nil || rule.addr != a) {
			last = p.refuse(target, a.String()+" is "+why)
			continue
		}
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("%s: no address", target)
	}
	return nil, last
}

// serve accepts the process's connections on ln until ctx ends or ln is closed, and handles
// each; it returns once every connection it handled is closed.
func (p *egressProxy) serve(ctx context.Context, ln net.Listener) {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		p.conns.Go(func() { p.handle(ctx, c) })
	}
	p.conns.Wait()
}

// handle serves one connection: SOCKS5 when its first byte is 5, HTTP otherwise.
func (p *egressProxy) handle(ctx context.Context, c net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(p.handshake))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	var up net.Conn
	if first[0] == 5 {
		up = p.socks5(ctx, c, br)
	} else {
		up = p.http(ctx, c, br)
	}
	if up == nil {
		return
	}
	defer up.Close()
	_ = c.SetDeadline(time.Time{})
	stopUp := context.AfterFunc(ctx, func() { _ = up.Close() })
	defer stopUp()
	splice(c, br, up)
}

// splice copies both ways until both directions end; what the reader br buffered from c
// goes first.
func splice(c net.Conn, br *bufio.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, br)
		closeWrite(up)
		close(done)
	}()
	_, _ = io.Copy(c, up)
	closeWrite(c)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// http serves an HTTP proxy request: CONNECT host:port opens a tunnel; a request with an
// absolute http:// URL is forwarded to its host (with Connection: close, so the upstream
// connection serves that request only). It returns the upstream connection, ready to
// splice, or nil after answering a refusal.
func (p *egressProxy) http(ctx context.Context, c net.Conn, br *bufio.Reader) net.Conn {
	req, err := http.ReadRequest(br)
	if err != nil {
		httpError(c, http.StatusBadRequest, "not an HTTP proxy request: "+err.Error())
		return nil
	}
	var hostport, defPort string
	switch {
	case req.Method == http.MethodConnect:
		hostport = req.Host
	case req.URL.Scheme == "http" && req.URL.Host != "":
		hostport, defPort = req.URL.Host, "80"
	default:
		httpError(c, http.StatusBadRequest, "this proxy serves CONNECT and http:// requests with an absolute URL")
		return nil
	}
	host, port, err := splitTarget(hostport, defPort)
	if err != nil {
		httpError(c, http.StatusBadRequest, err.Error())
		return nil
	}
	up, err := p.dial(ctx, host, port)
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errEgressRefused) {
			status = http.StatusForbidden
		}
		httpError(c, status, err.Error())
		return nil
	}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			_ = up.Close()
			return nil
		}
		return up
	}
	req.RequestURI = ""
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	if err := req.Write(up); err != nil {
		_ = up.Close()
		httpError(c, http.StatusBadGateway, err.Error())
		return nil
	}
	return up
}

// splitTarget splits host:port (port defaulting to def when absent and def is set).
func splitTarget(hostport, def string) (string, int, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil && def != "" && !strings.Contains(strings.TrimPrefix(hostport, "["), "]:") {
		host, port, err = strings.Trim(hostport, "[]"), def, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("target %q is not host:port", hostport)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return "", 0, fmt.Errorf("target %q has no numeric port", hostport)
	}
	return host, n, nil
}

func httpError(c net.Conn, status int, msg string) {
	_, _ = fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s\n",
		status, http.StatusText(status), len(msg)+1, msg)
}

// SOCKS5 (RFC 1928) constants.
const (
	socksVersion      = 5
	socksNoAuth       = 0
	socksNoAcceptable = 0xff
	socksConnect      = 1
	socksIPv4         = 1
	socksDomain       = 3
	socksIPv6         = 4

	socksSucceeded       = 0
	socksGeneralFailure  = 1
	socksNotAllowed      = 2
	socksHostUnreachable = 4
	socksRefused         = 5
	socksBadCommand      = 7
	socksBadAddressType  = 8
)

// socks5 serves a SOCKS5 CONNECT without authentication; a refusal by policy is reply 2,
// "connection not allowed by ruleset".
func (p *egressProxy) socks5(ctx context.Context, c net.Conn, br *bufio.Reader) net.Conn {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return nil
	}
	if !strings.ContainsRune(string(methods), socksNoAuth) {
		_, _ = c.Write([]byte{socksVersion, socksNoAcceptable})
		return nil
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return nil
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil || req[0] != socksVersion {
		return nil
	}
	var host string
	switch req[3] {
	case socksIPv4, socksIPv6:
		b := make([]byte, map[byte]int{socksIPv4: 4, socksIPv6: 16}[req[3]])
		if _, err := io.ReadFull(br, b); err != nil {
			return nil
		}
		a, _ := netip.AddrFromSlice(b)
		host = a.Unmap().String()
	case socksDomain:
		n, err := br.ReadByte()
		if err != nil {
			return nil
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil
		}
		host = string(b)
	default:
		socksReply(c, socksBadAddressType)
		return nil
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return nil
	}
	if req[1] != socksConnect {
		socksReply(c, socksBadCommand)
		return nil
	}
	up, err := p.dial(ctx, host, int(binary.BigEndian.Uint16(pb[:])))
	switch {
	case errors.Is(err, errEgressRefused):
		socksReply(c, socksNotAllowed)
		return nil
	case errors.Is(err, syscall.ECONNREFUSED):
		socksReply(c, socksRefused)
		return nil
	case err != nil:
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			socksReply(c, socksHostUnreachable)
		} else {
			socksReply(c, socksGeneralFailure)
		}
		return nil
	}
	socksReply(c, socksSucceeded)
	return up
}

// socksReply answers a SOCKS5 request with code and the bound address 0.0.0.0:0.
func socksReply(c net.Conn, code byte) {
	_, _ = c.Write([]byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
}
