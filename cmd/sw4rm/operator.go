package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// operatorFlags are the connection flags every operator command group shares: where the
// server is and the operator's token (the same token authorizes HITL and DLQ operations).
type operatorFlags struct {
	server, token string
}

// register adds --server and --token to a command group.
func (f *operatorFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.server, "server", envOr("SW4RM_SERVER", "localhost:50051"), "sw4rm gRPC address (SW4RM_SERVER)")
	cmd.PersistentFlags().StringVar(&f.token, "token", os.Getenv("SW4RM_OPERATOR_TOKEN"), "operator token (SW4RM_OPERATOR_TOKEN)")
}

// dial connects to the server and returns a context carrying the operator's credentials and
// the CLI marker (recorded as the door a decision came through).
func (f *operatorFlags) dial(cmd *cobra.Command, opts ...grpc.DialOption) (*grpc.ClientConn, context.Context, error) {
	conn, err := grpc.NewClient(f.server, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	ctx := metadata.AppendToOutgoingContext(cmd.Context(), "authorization", "Bearer "+f.token, "sw4rm-client", "cli")
	return conn, ctx, nil
}
