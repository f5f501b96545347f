package main

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles/tlstest"
)

// hitlAdmin answers ListInvocations with nothing, recording the operator's token.
type hitlAdmin struct {
	hitladminpb.UnimplementedHitlAdminServiceServer
	tokens chan string
}

func (h *hitlAdmin) ListInvocations(ctx context.Context, _ *hitladminpb.ListInvocationsRequest) (*hitladminpb.ListInvocationsResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) > 0 {
		h.tokens <- v[0]
	}
	return &hitladminpb.ListInvocationsResponse{}, nil
}

// TestOperatorTLS: the operator commands reach a server that requires mutual TLS with
// --tls-ca, --tls-cert and --tls-key or their variables, and not without a client
// certificate or in plaintext.
func TestOperatorTLS(t *testing.T) {
	for _, name := range []string{"SW4RM_TLS_CA_FILE", "SW4RM_TLS_CLIENT_CERT_FILE", "SW4RM_TLS_CLIENT_KEY_FILE", "SW4RM_SERVER"} {
		unsetenv(t, name)
	}
	ca := tlstest.NewCA(t, "ca")
	server := ca.Server(t, "server")
	operator := ca.Client(t, "operator")
	cfg, err := tlsfiles.ServerConfig(server.CertFile, server.KeyFile, ca.File, nil)
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	admin := &hitlAdmin{tokens: make(chan string, 10)}
	hitladminpb.RegisterHitlAdminServiceServer(g, admin)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	addr := lis.Addr().String()

	_, err = run(t, "hitl", "list", "--server", addr, "--token", "tok", "--tls-ca", ca.File, "--tls-cert", operator.CertFile, "--tls-key", operator.KeyFile)
	require.NoError(t, err)
	assert.Equal(t, "Bearer tok", <-admin.tokens)

	_, err = run(t, "hitl", "list", "--server", addr, "--tls-ca", ca.File)
	assert.Error(t, err, "no client certificate")
	_, err = run(t, "hitl", "list", "--server", addr)
	assert.Error(t, err, "plaintext")
	_, err = run(t, "dlq", "list", "--server", addr, "--tls-ca", ca.File, "--tls-cert", operator.CertFile)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set both files")

	t.Setenv("SW4RM_TLS_CA_FILE", ca.File)
	t.Setenv("SW4RM_TLS_CLIENT_CERT_FILE", operator.CertFile)
	t.Setenv("SW4RM_TLS_CLIENT_KEY_FILE", operator.KeyFile)
	t.Setenv("SW4RM_SERVER", addr)
	_, err = run(t, "hitl", "list")
	require.NoError(t, err, "the variables are the flags' defaults")
	_, err = run(t, "hitl", "list", "--tls-cert", "", "--tls-key", "")
	assert.Error(t, err, "a flag set on the command line wins over its variable")
}
