package sdk

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sw4rm/sw4rm-temporal/tlsfiles"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles/tlstest"
)

// tlsServer serves grpc.health.v1 on a loopback port, over TLS unless cfg is nil.
func tlsServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var opts []grpc.ServerOption
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// reach dials addr as an agent with opts and calls the health service through its
// connection; a Dial error is returned as is.
func reach(t *testing.T, addr string, opts ...grpc.DialOption) error {
	t.Helper()
	a, err := Dial(addr, "agent-1", opts...)
	if err != nil {
		return err
	}
	defer func() { _ = a.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(a.Conn()).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func clearTLSEnv(t *testing.T) {
	t.Helper()
	for _, name := range []string{EnvTLSCAFile, EnvTLSClientCertFile, EnvTLSClientKeyFile} {
		t.Setenv(name, "")
		require.NoError(t, os.Unsetenv(name))
	}
}

// TestDialTLS: WithTLS and WithTLSConfig reach a TLS server; plaintext, the default without
// settings, does not.
func TestDialTLS(t *testing.T) {
	clearTLSEnv(t)
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	cfg, err := tlsfiles.ServerConfig(server.CertFile, server.KeyFile, "", nil)
	require.NoError(t, err)
	addr := tlsServer(t, cfg)

	require.NoError(t, reach(t, addr, WithTLS(ca.File, "", "")))
	pem, err := os.ReadFile(ca.File)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	require.NoError(t, reach(t, addr, WithTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
	assert.Error(t, reach(t, addr), "without settings Dial is plaintext, which a TLS server refuses")
	assert.Error(t, reach(t, addr, WithTLS(tlstest.NewCA(t, "stranger").File, "", "")), "a server the CA does not vouch for")
}

// TestDialMutualTLS: a server requiring client certificates admits the agent that presents
// one, by option or by environment, and no other.
func TestDialMutualTLS(t *testing.T) {
	clearTLSEnv(t)
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	client := ca.Client(t, "agent-1")
	cfg, err := tlsfiles.ServerConfig(server.CertFile, server.KeyFile, ca.File, nil)
	require.NoError(t, err)
	addr := tlsServer(t, cfg)

	require.NoError(t, reach(t, addr, WithTLS(ca.File, client.CertFile, client.KeyFile)))
	assert.Error(t, reach(t, addr, WithTLS(ca.File, "", "")), "no client certificate")

	t.Setenv(EnvTLSCAFile, ca.File)
	assert.Error(t, reach(t, addr), "the environment's CA alone: no client certificate")
	t.Setenv(EnvTLSClientCertFile, client.CertFile)
	t.Setenv(EnvTLSClientKeyFile, client.KeyFile)
	require.NoError(t, reach(t, addr), "the environment's CA and client certificate")
}

// TestDialTransportPrecedence: the caller's own transport credentials win over the
// environment, and an explicit TLS option means the environment is not read.
func TestDialTransportPrecedence(t *testing.T) {
	clearTLSEnv(t)
	ca := tlstest.NewCA(t, "ca")
	plain := tlsServer(t, nil)
	require.NoError(t, reach(t, plain), "no settings: plaintext, as on a laptop")

	t.Setenv(EnvTLSCAFile, ca.File)
	assert.Error(t, reach(t, plain), "the environment turns TLS on")
	require.NoError(t, reach(t, plain, grpc.WithTransportCredentials(insecure.NewCredentials())), "the caller's credentials win")

	t.Setenv(EnvTLSClientCertFile, "/nonexistent/cert.pem")
	err := reach(t, plain)
	require.Error(t, err)
	assert.Contains(t, err.Error(), EnvTLSClientCertFile)
	assert.Contains(t, err.Error(), "set both files")

	server := ca.Server(t, "server")
	cfg, err := tlsfiles.ServerConfig(server.CertFile, server.KeyFile, "", nil)
	require.NoError(t, err)
	require.NoError(t, reach(t, tlsServer(t, cfg), WithTLS(ca.File, "", "")), "an explicit option: the broken environment is not read")
}

// TestDialRefusesBadTLSFiles: files that do not load fail Dial itself, naming the problem.
func TestDialRefusesBadTLSFiles(t *testing.T) {
	clearTLSEnv(t)
	ca := tlstest.NewCA(t, "ca")
	client := ca.Client(t, "agent-1")
	for _, tc := range []struct {
		ca, cert, key, want string
	}{
		{"/nonexistent/ca.pem", "", "", "/nonexistent/ca.pem"},
		{client.KeyFile, "", "", "holds no PEM certificate"},
		{ca.File, client.CertFile, "", "set both files"},
		{ca.File, client.CertFile, client.CertFile, "certificate " + client.CertFile},
	} {
		_, err := Dial("127.0.0.1:1", "agent-1", WithTLS(tc.ca, tc.cert, tc.key))
		require.Error(t, err, "%+v", tc)
		assert.Contains(t, err.Error(), tc.want)
	}
}
