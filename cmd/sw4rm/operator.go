package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/tlsfiles"
)

// operatorFlags are the connection flags every operator command group shares: where the
// server is, how to reach it (TLS, mutual TLS) and the operator's token (the same token
// authorizes HITL and DLQ operations).
type operatorFlags struct {
	server, token          string
	tlsCA, tlsCert, tlsKey string
}

// register adds --server, --token and the TLS flags to a command group.
func (f *operatorFlags) register(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.server, "server", envOr("SW4RM_SERVER", "localhost:50051"), "sw4rm gRPC address (SW4RM_SERVER)")
	pf.StringVar(&f.token, "token", os.Getenv("SW4RM_OPERATOR_TOKEN"), "operator token (SW4RM_OPERATOR_TOKEN); with neither, a server on loopback gets the token sw4rm dev left for its default operator")
	pf.StringVar(&f.tlsCA, "tls-ca", os.Getenv("SW4RM_TLS_CA_FILE"), "PEM CA bundle that signs the server's certificate; any --tls-* flag turns TLS on, empty CA uses the system's roots (SW4RM_TLS_CA_FILE)")
	pf.StringVar(&f.tlsCert, "tls-cert", os.Getenv("SW4RM_TLS_CLIENT_CERT_FILE"), "PEM client certificate, for a server that requires mutual TLS (SW4RM_TLS_CLIENT_CERT_FILE)")
	pf.StringVar(&f.tlsKey, "tls-key", os.Getenv("SW4RM_TLS_CLIENT_KEY_FILE"), "PEM private key of --tls-cert (SW4RM_TLS_CLIENT_KEY_FILE)")
}

// transport is TLS when any TLS flag is set (from the command line or its variable), else
// plaintext.
func (f *operatorFlags) transport() (credentials.TransportCredentials, error) {
	if f.tlsCA == "" && f.tlsCert == "" && f.tlsKey == "" {
		return insecure.NewCredentials(), nil
	}
	cfg, err := tlsfiles.ClientConfig(f.tlsCA, f.tlsCert, f.tlsKey)
	if err != nil {
		return nil, fmt.Errorf("TLS (--tls-ca, --tls-cert, --tls-key): %w", err)
	}
	return credentials.NewTLS(cfg), nil
}

// dial connects to the server and returns a context carrying the operator's credentials and
// the CLI marker (recorded as the door a decision came through). Without a token, a server
// on loopback gets the one `sw4rm dev` left for its default operator (devToken).
func (f *operatorFlags) dial(cmd *cobra.Command, opts ...grpc.DialOption) (*grpc.ClientConn, context.Context, error) {
	creds, err := f.transport()
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(f.server, append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	token := f.token
	if token == "" {
		token = devToken(f.server)
	}
	ctx := metadata.AppendToOutgoingContext(cmd.Context(), "authorization", "Bearer "+token, wire.ClientKey, wire.ClientCLI)
	return conn, ctx, nil
}
