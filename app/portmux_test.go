package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles/tlstest"
)

// countingListener counts the connections a server accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// muxed is a port served as App.serve serves it, with the connections each server took.
type muxed struct {
	addr       string
	grpc, http *countingListener
}

// serveMuxed serves grpc.health.v1 on a loopback port through portMux: grpc-go's transport
// behind one side, frontend.HTTPHandler behind the other.
func serveMuxed(t testing.TB, tlsCfg *tls.Config) *muxed {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	m := newPortMux(ln, tlsCfg, slog.New(slog.DiscardHandler), 500*time.Millisecond)
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	h, err := frontend.HTTPHandler(g, 1<<20)
	require.NoError(t, err)
	p := &muxed{addr: ln.Addr().String(), grpc: &countingListener{Listener: m.grpc}, http: &countingListener{Listener: m.http}}
	srv := portHTTPServer(h, slog.New(slog.DiscardHandler))
	go func() { _ = g.Serve(p.grpc) }()
	go func() { _ = srv.Serve(p.http) }()
	t.Cleanup(func() { g.Stop(); _ = srv.Close(); _ = ln.Close() })
	return p
}

// connectCheck calls Health/Check as Connect JSON through client and returns the HTTP
// version that answered and the body.
func connectCheck(t *testing.T, client *http.Client, url string) (string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/grpc.health.v1.Health/Check", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return resp.Proto, string(body)
}

func http1Client(c *tls.Config) *http.Client {
	// An empty TLSNextProto and no ForceAttemptHTTP2: this transport cannot speak HTTP/2.
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
}

func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &p}}
}

func grpcCheck(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, resp.GetStatus())
}

// TestPortMuxPlaintext: on one cleartext port, native gRPC goes to grpc-go's transport and
// Connect over HTTP/1.1 and over HTTP/2 (prior knowledge) to net/http.
func TestPortMuxPlaintext(t *testing.T) {
	p := serveMuxed(t, nil)

	grpcCheck(t, p.addr, insecure.NewCredentials())
	assert.EqualValues(t, 1, p.grpc.n.Load(), "native gRPC is served by grpc-go's transport")
	assert.EqualValues(t, 0, p.http.n.Load())

	proto, body := connectCheck(t, http1Client(nil), "http://"+p.addr)
	assert.Equal(t, "HTTP/1.1", proto)
	assert.JSONEq(t, `{"status":"SERVING"}`, body)
	assert.EqualValues(t, 1, p.http.n.Load())

	proto, body = connectCheck(t, h2cClient(), "http://"+p.addr)
	assert.Equal(t, "HTTP/2.0", proto)
	assert.JSONEq(t, `{"status":"SERVING"}`, body)
	assert.EqualValues(t, 2, p.http.n.Load(), "Connect over cleartext HTTP/2 is served by net/http")
	assert.EqualValues(t, 1, p.grpc.n.Load())
}

// TestPortMuxTLS: with TLS, ALPN and the first request decide the same way, and the TLS
// handshake happens once, in portMux.
func TestPortMuxTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	cfg := DefaultConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = server.CertFile, server.KeyFile
	tlsCfg, err := ServerTLS(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	p := serveMuxed(t, tlsCfg)

	grpcCheck(t, p.addr, credentials.NewTLS(clientTLS(t, ca, nil)))
	assert.EqualValues(t, 1, p.grpc.n.Load())

	proto, _ := connectCheck(t, http1Client(clientTLS(t, ca, nil)), "https://"+p.addr)
	assert.Equal(t, "HTTP/1.1", proto)
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca, nil), ForceAttemptHTTP2: true}}
	proto, _ = connectCheck(t, h2, "https://"+p.addr)
	assert.Equal(t, "HTTP/2.0", proto, "a browser's Connect over TLS negotiates h2")
	assert.EqualValues(t, 2, p.http.n.Load())
	assert.EqualValues(t, 1, p.grpc.n.Load())

	// Plaintext on a TLS port is refused.
	_, err = http1Client(nil).Post("http://"+p.addr+"/grpc.health.v1.Health/Check", "application/json", strings.NewReader("{}"))
	assert.Error(t, err)
}

// TestPortMuxGRPCWeb: gRPC-Web over HTTP/1.1 reaches the same service.
func TestPortMuxGRPCWeb(t *testing.T) {
	p := serveMuxed(t, nil)
	var body bytes.Buffer
	body.Write([]byte{0, 0, 0, 0, 0}) // an empty HealthCheckRequest, enveloped
	req, err := http.NewRequest(http.MethodPost, "http://"+p.addr+"/grpc.health.v1.Health/Check", &body)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/grpc-web+proto")
	resp, err := http1Client(nil).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.GreaterOrEqual(t, len(out), 5)
	n := binary.BigEndian.Uint32(out[1:5])
	assert.Equal(t, byte(0), out[0], "the first frame is the message")
	assert.Equal(t, []byte{0x08, 0x01}, out[5:5+n], "status SERVING")
	assert.Contains(t, strings.ToLower(string(out[5+n:])), "grpc-status: 0", "the trailers frame")
}

// TestPortMuxShortHTTP1Request: a request shorter than HTTP/2's preface is answered at once,
// not after the sniffing timeout.
func TestPortMuxShortHTTP1Request(t *testing.T) {
	p := serveMuxed(t, nil)
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = io.WriteString(c, "GET / HTTP/1.0\r\n\r\n") // 18 bytes
	require.NoError(t, err)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := io.ReadAll(io.LimitReader(c, 12))
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.0 404", string(line))
	assert.Less(t, time.Since(start), 400*time.Millisecond, "answered before the sniffing timeout")
}

// TestPortMuxIdleHTTP2GoesToGRPC: an HTTP/2 connection that makes no call within the
// sniffing timeout is given to grpc-go (a gRPC channel connecting ahead of its first call),
// with the bytes already read, and its later call is served.
func TestPortMuxIdleHTTP2GoesToGRPC(t *testing.T) {
	p := serveMuxed(t, nil)
	c, err := net.Dial("tcp", p.addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(c, c)
	require.NoError(t, fr.WriteSettings())
	require.Eventually(t, func() bool { return p.grpc.n.Load() == 1 }, 5*time.Second, 20*time.Millisecond)
	// grpc-go's SETTINGS arrive after portMux's empty one.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var settings int
	for settings < 2 {
		f, err := fr.ReadFrame()
		require.NoError(t, err)
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			settings++
		}
	}
}

// TestAckDropper: the first SETTINGS ACK after the skipped bytes is removed, whatever the
// sizes of the reads, and every other byte passes in order.
func TestAckDropper(t *testing.T) {
	frame := func(typ http2.FrameType, flags http2.Flags, payload string) []byte {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		require.NoError(t, fr.WriteRawFrame(typ, flags, 0, []byte(payload)))
		return b.Bytes()
	}
	head := []byte("preface+frames")
	ping := frame(http2.FramePing, 0, "12345678")
	ack := frame(http2.FrameSettings, http2.FlagSettingsAck, "")
	data := frame(http2.FrameData, 0, "hello")
	in := bytes.Join([][]byte{head, ping, ack, data, ack}, nil)
	want := bytes.Join([][]byte{head, ping, data, ack}, nil)
	for _, size := range []int{1, 3, 9, 10, 64} {
		d := &ackDropper{r: bytes.NewReader(in), skip: len(head)}
		var got []byte
		buf := make([]byte, size)
		for {
			n, err := d.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				require.ErrorIs(t, err, io.EOF)
				break
			}
		}
		assert.Equal(t, want, got, "reads of %d bytes", size)
	}
}
