package app

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The gRPC port serves two servers on one listener (§5.1: HTTP/2 preferred, HTTP/1.1 as the
// fallback). grpc-go's own HTTP/2 transport serves native gRPC, because it is faster than
// grpc-go's http.Handler (docs/http1.md gives the figures); net/http serves everything else —
// Connect and gRPC-Web over HTTP/1.1 or HTTP/2 — through vanguard (frontend.HTTPHandler).
//
// portMux tells them apart per connection, before either server reads a byte:
//
//   - With TLS it completes the handshake itself (ALPN offers h2 and http/1.1). A connection
//     that did not choose h2 is HTTP/1.1 and goes to net/http as the *tls.Conn it is.
//   - Without TLS, a connection that does not open with HTTP/2's preface is HTTP/1.1.
//   - An HTTP/2 connection is gRPC when the content-type of its first request is
//     application/grpc[+…] (one connection carries one client's calls, and a gRPC client
//     speaks nothing else). To read that request, portMux sends an empty SETTINGS frame
//     first, since grpc-go's client waits for the server's SETTINGS before its first call;
//     the bytes read are replayed to the server that gets the connection, and net/http,
//     which refuses an ACK of SETTINGS it never sent, gets the client's ACK of portMux's
//     SETTINGS removed from the stream.
type portMux struct {
	ln  net.Listener
	tls *tls.Config
	log *slog.Logger
	// grpc receives native gRPC connections; http everything else.
	grpc, http *chanListener
	// sniffTimeout bounds how long a connection may take to show what it speaks.
	sniffTimeout time.Duration
}

// defaultSniffTimeout bounds how long a connection may take to show what it speaks.
const defaultSniffTimeout = 10 * time.Second

// newPortMux starts classifying the connections ln accepts; close ln to stop it. sniffTimeout
// is portMux.sniffTimeout; zero means defaultSniffTimeout.
func newPortMux(ln net.Listener, tlsCfg *tls.Config, log *slog.Logger, sniffTimeout time.Duration) *portMux {
	if sniffTimeout <= 0 {
		sniffTimeout = defaultSniffTimeout
	}
	m := &portMux{ln: ln, log: log, grpc: newChanListener(ln.Addr()), http: newChanListener(ln.Addr()), sniffTimeout: sniffTimeout}
	if tlsCfg != nil {
		m.tls = tlsCfg.Clone()
		m.tls.NextProtos = []string{"h2", "http/1.1"}
	}
	go m.run()
	return m
}

func (m *portMux) run() {
	defer func() { _ = m.grpc.Close(); _ = m.http.Close() }()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return
		}
		go m.classify(c)
	}
}

// classify hands c to the server that speaks its protocol, or closes it.
func (m *portMux) classify(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(m.sniffTimeout))
	to, conn, err := m.sniff(c)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			m.log.Debug("connection closed before its protocol was known", "remote", c.RemoteAddr().String(), "error", err)
		}
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	to.deliver(conn)
}

// sniff reads as much of c as it needs to choose a server.
func (m *portMux) sniff(c net.Conn) (*chanListener, net.Conn, error) {
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		if err := tc.Handshake(); err != nil {
			return nil, nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol != "h2" {
			// net/http recognises the *tls.Conn: the request gets its TLS state.
			return m.http, tc, nil
		}
		c = tc
	}
	br := bufio.NewReaderSize(c, len(http2.ClientPreface))
	// Byte by byte where need be: a short HTTP/1.x request must not wait for 24 bytes.
	for n := 1; ; {
		head, err := br.Peek(n)
		if !strings.HasPrefix(http2.ClientPreface, string(head)) {
			return m.http, &replayConn{Conn: c, r: br}, nil
		}
		if len(head) == len(http2.ClientPreface) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		n = min(max(br.Buffered(), n+1), len(http2.ClientPreface))
	}
	_, _ = br.Discard(len(http2.ClientPreface))
	grpc, frames, acked, err := sniffH2(c, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// An HTTP/2 client that opened a connection and made no call yet: gRPC's clients
		// do that (a proxy's pool, a reconnecting channel), so it goes to gRPC, with the
		// bytes read so far.
		grpc, err = true, nil
	}
	if err != nil {
		return nil, nil, err
	}
	replay := io.MultiReader(strings.NewReader(http2.ClientPreface), bytes.NewReader(frames), br)
	if grpc {
		// grpc-go ignores SETTINGS ACKs, so the extra one can stay.
		return m.grpc, &replayConn{Conn: c, r: replay}, nil
	}
	if !acked {
		replay = &ackDropper{r: replay, skip: len(http2.ClientPreface) + len(frames)}
	}
	return m.http, &replayConn{Conn: c, r: replay}, nil
}

// sniffH2 writes an empty SETTINGS frame to c and reads frames from r until the client's
// first request headers. It returns whether they are gRPC's, the frames it read (less the
// client's ACK of that SETTINGS, when it came before them) and whether the ACK came.
func sniffH2(c net.Conn, r io.Reader) (grpc bool, frames []byte, acked bool, err error) {
	if err := http2.NewFramer(c, nil).WriteSettings(); err != nil {
		return false, nil, false, err
	}
	var raw bytes.Buffer
	fr := http2.NewFramer(nil, io.TeeReader(r, &raw))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	for {
		before := raw.Len()
		f, err := fr.ReadFrame()
		if err != nil {
			return false, raw.Bytes(), acked, fmt.Errorf("read HTTP/2 frames: %w", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() && !acked {
				acked = true
				raw.Truncate(before) // the client's ACK of portMux's SETTINGS
			}
		case *http2.MetaHeadersFrame:
			ct := f.PseudoValue("content-type")
			for _, hf := range f.RegularFields() {
				if hf.Name == "content-type" {
					ct = hf.Value
				}
			}
			return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;"), raw.Bytes(), acked, nil
		}
	}
}

// ackDropper passes an HTTP/2 stream through, less the first SETTINGS ACK after skip bytes
// (which are passed as they are).
type ackDropper struct {
	r    io.Reader
	skip int
	// head holds a frame header being read; left is what remains of the current frame.
	head    [9]byte
	headLen int
	left    int
	done    bool
}

func (d *ackDropper) Read(p []byte) (int, error) {
	if d.done || len(p) == 0 {
		return d.r.Read(p)
	}
	if d.skip > 0 {
		n, err := d.r.Read(p[:min(len(p), d.skip)])
		d.skip -= n
		return n, err
	}
	if d.left > 0 {
		n, err := d.r.Read(p[:min(len(p), d.left)])
		d.left -= n
		return n, err
	}
	for {
		// At a frame boundary: read the whole header before deciding.
		n, err := d.r.Read(d.head[d.headLen:])
		d.headLen += n
		if d.headLen < len(d.head) {
			if err != nil {
				return copy(p, d.head[:d.headLen]), err
			}
			continue
		}
		d.headLen = 0
		length := int(d.head[0])<<16 | int(d.head[1])<<8 | int(d.head[2])
		if http2.FrameType(d.head[3]) == http2.FrameSettings && http2.Flags(d.head[4]).Has(http2.FlagSettingsAck) && length == 0 {
			d.done = true
			return d.r.Read(p)
		}
		d.left = length
		if len(p) < len(d.head) {
			// Too small for the header: hand it over through a replay.
			d.r = io.MultiReader(bytes.NewReader(append([]byte(nil), d.head[:]...)), d.r)
			d.left, d.skip = 0, len(d.head)+length
			return d.Read(p)
		}
		return copy(p, d.head[:]), nil
	}
}

// replayConn is a connection whose first bytes come from r (bytes already read, then the
// connection itself).
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// chanListener is a net.Listener fed with connections portMux classified.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// Accept implements net.Listener.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *chanListener) Addr() net.Addr { return l.addr }
