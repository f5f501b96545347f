package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sw4rm/sw4rm-temporal/tlsfiles/tlstest"
)

// syncBuffer is a log destination safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveForTest starts the process's gRPC and HTTP ports exactly as the server role does
// (App.serve with the options of the frontend and ServerTLS), serving grpc.health.v1 and a
// /healthz that answers "ok", on loopback ports of its own.
func serveForTest(t *testing.T, cfg Config) (*App, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	tlsCfg, err := ServerTLS(cfg, log)
	require.NoError(t, err)
	a := &App{cfg: cfg, log: log}
	t.Cleanup(a.Stop)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	require.NoError(t, a.serve(cfg, tlsCfg, func(g *grpc.Server) { healthpb.RegisterHealthServer(g, health.NewServer()) }, mux))
	return a, logs
}

// clientTLS trusts ca and presents client, if given.
func clientTLS(t *testing.T, ca *tlstest.CA, client *tlstest.Pair) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(ca.File)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != nil {
		pair, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
		require.NoError(t, err)
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

// checkGRPC calls grpc.health.v1 Check on addr with creds.
func checkGRPC(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// getHealthz fetches /healthz with client (nil: plaintext) and returns the body of a 200.
func getHealthz(t *testing.T, scheme, addr string, c *tls.Config) (string, error) {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
	resp, err := client.Get(scheme + "://" + addr + "/healthz")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		return "", &httpStatusError{code: resp.StatusCode}
	}
	return string(body), nil
}

type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string { return http.StatusText(e.code) }

// TestPlaintextByDefault: without TLS settings the ports speak plaintext as before.
func TestPlaintextByDefault(t *testing.T) {
	a, logs := serveForTest(t, DefaultConfig())
	require.NoError(t, checkGRPC(t, a.GRPCAddr(), insecure.NewCredentials()))
	body, err := getHealthz(t, "http", a.HTTPAddr(), nil)
	require.NoError(t, err)
	assert.Equal(t, "ok", body)
	assert.Equal(t, "http", a.HTTPScheme())
	assert.Contains(t, logs.String(), "tls=false")
}

// TestTLS: with a certificate and key both ports speak TLS only: a client trusting the CA
// gets through, a plaintext client and one that does not trust the CA do not.
func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	cfg := DefaultConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = server.CertFile, server.KeyFile
	a, _ := serveForTest(t, cfg)
	assert.Equal(t, "https", a.HTTPScheme())

	require.NoError(t, checkGRPC(t, a.GRPCAddr(), credentials.NewTLS(clientTLS(t, ca, nil))))
	assert.Error(t, checkGRPC(t, a.GRPCAddr(), insecure.NewCredentials()), "a plaintext client must not get through")
	stranger := tlstest.NewCA(t, "stranger")
	assert.Error(t, checkGRPC(t, a.GRPCAddr(), credentials.NewTLS(clientTLS(t, stranger, nil))), "a client that does not trust the CA must not get through")

	body, err := getHealthz(t, "https", a.HTTPAddr(), clientTLS(t, ca, nil))
	require.NoError(t, err)
	assert.Equal(t, "ok", body)
	_, err = getHealthz(t, "http", a.HTTPAddr(), nil)
	assert.Error(t, err, "plaintext HTTP must not be served")
}

// TestMutualTLS: with a client CA, a client must present a certificate that CA signed, on
// both ports.
func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	clients := tlstest.NewCA(t, "clients")
	good := clients.Client(t, "agent-1")
	foreign := ca.Client(t, "agent-2") // signed by the server's CA, not the client CA
	cfg := DefaultConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = server.CertFile, server.KeyFile, clients.File
	a, logs := serveForTest(t, cfg)

	require.NoError(t, checkGRPC(t, a.GRPCAddr(), credentials.NewTLS(clientTLS(t, ca, &good))))
	assert.Error(t, checkGRPC(t, a.GRPCAddr(), credentials.NewTLS(clientTLS(t, ca, nil))), "no client certificate")
	assert.Error(t, checkGRPC(t, a.GRPCAddr(), credentials.NewTLS(clientTLS(t, ca, &foreign))), "a client certificate of another CA")
	assert.Error(t, checkGRPC(t, a.GRPCAddr(), insecure.NewCredentials()))

	_, err := getHealthz(t, "https", a.HTTPAddr(), clientTLS(t, ca, &good))
	require.NoError(t, err)
	_, err = getHealthz(t, "https", a.HTTPAddr(), clientTLS(t, ca, nil))
	assert.Error(t, err, "no client certificate on the HTTP port")
	assert.NotContains(t, logs.String(), "level=ERROR")
}

// servedCN is the common name of the certificate the TLS server at addr presents.
func servedCN(t *testing.T, addr string, c *tls.Config) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, c)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestCertificateRotation: replacing the certificate files changes the certificate both
// ports serve at the next handshake, without a restart, and the reload is logged.
func TestCertificateRotation(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "first")
	cfg := DefaultConfig()
	cfg.TLSCertFile, cfg.TLSKeyFile = server.CertFile, server.KeyFile
	a, logs := serveForTest(t, cfg)
	c := clientTLS(t, ca, nil)
	assert.Equal(t, "first", servedCN(t, a.GRPCAddr(), c))
	assert.Equal(t, "first", servedCN(t, a.HTTPAddr(), c))

	ca.WriteServer(t, server, "second")
	assert.Equal(t, "second", servedCN(t, a.GRPCAddr(), c))
	assert.Equal(t, "second", servedCN(t, a.HTTPAddr(), c))
	require.NoError(t, checkGRPC(t, a.GRPCAddr(), credentials.NewTLS(c)))
	assert.Contains(t, logs.String(), "TLS certificate reloaded")
}

// TestServerTLSRefusesHalfConfigurations: only one of certificate and key, a client CA
// alone, or unreadable files stop the process with a message naming the settings.
func TestServerTLSRefusesHalfConfigurations(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	missing := filepath.Join(t.TempDir(), "missing.pem")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		cert, key, clientCA, want string
	}{
		{server.CertFile, "", "", "set both files"},
		{"", server.KeyFile, "", "set both files"},
		{"", "", ca.File, "needs the server's own certificate"},
		{missing, server.KeyFile, "", "missing.pem"},
		{server.CertFile, server.KeyFile, missing, "missing.pem"},
	} {
		cfg := DefaultConfig()
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile = tc.cert, tc.key, tc.clientCA
		_, err := ServerTLS(cfg, log)
		require.Error(t, err, "%+v", tc)
		assert.Contains(t, err.Error(), "SW4RM_TLS_CERT_FILE")
		assert.Contains(t, err.Error(), tc.want)
	}
}
