package app

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/console"
	"github.com/sw4rm/sw4rm-temporal/frontend"
	"github.com/sw4rm/sw4rm-temporal/telemetry"
)

// newConsole builds the operator console (console.Prefix on the HTTP port), unless the HTTP
// port is off. The console calls the frontend's services over an in-process listener of the
// same grpc.Server (serve starts it), so every page and action passes the interceptors —
// authentication, authorization, the error table, the audit — as a CLI call does, without a
// network hop or the port's TLS.
func (a *App) newConsole(p prepared, tls bool) error {
	if p.HTTPAddr == "" {
		return nil
	}
	a.inproc = bufconn.Listen(1 << 20)
	opts := []grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return a.inproc.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(frontend.MaxRequestBytes(p.MaxPayloadBytes))),
	}
	if telemetry.Enabled() {
		// An operator's action in the console and the calls it makes are one trace.
		opts = append(opts, grpc.WithStatsHandler(telemetry.ClientHandler()))
	}
	conn, err := grpc.NewClient("passthrough:///console", opts...)
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	policy := p.HITLPolicy
	c, err := console.New(console.Config{
		Conn: conn,
		OperatorName: func(token string) (string, bool) {
			op, ok := policy.OperatorForToken(token)
			return op.Name, ok
		},
		AuthOff:    p.Auth == auth.Off,
		TLS:        tls,
		TemporalUI: p.TemporalUI,
		Namespace:  p.Namespace,
		Log:        a.log,
	})
	if err != nil {
		_ = conn.Close()
		return err
	}
	a.console, a.consoleConn = c, conn
	return nil
}
