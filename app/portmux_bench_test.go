package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sw4rm/sw4rm-temporal/frontend"
)

// BenchmarkPort: one small unary call (grpc.health.v1.Health/Check) on each path the gRPC
// port offers, in cleartext on loopback — the figures docs/http1.md gives for why native gRPC
// stays on grpc-go's own transport rather than on net/http (grpc.Server.ServeHTTP), which
// would let one server take every protocol. Run: go test ./app -run '^$' -bench BenchmarkPort.
func BenchmarkPort(b *testing.B) {
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	h, err := frontend.HTTPHandler(g, 1<<20)
	require.NoError(b, err)

	// The port as App.serve serves it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	m := newPortMux(ln, nil, slog.New(slog.DiscardHandler), 0)
	srv := portHTTPServer(h, slog.New(slog.DiscardHandler))
	go func() { _ = g.Serve(m.grpc) }()
	go func() { _ = srv.Serve(m.http) }()
	// The alternative: every protocol on net/http, gRPC through grpc.Server.ServeHTTP.
	alt, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	altSrv := portHTTPServer(h, slog.New(slog.DiscardHandler))
	go func() { _ = altSrv.Serve(alt) }()
	b.Cleanup(func() { g.Stop(); _ = srv.Close(); _ = altSrv.Close(); _ = ln.Close(); _ = alt.Close() })

	grpcBench := func(addr string) func(*testing.B) {
		return func(b *testing.B) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(b, err)
			defer conn.Close()
			c := healthpb.NewHealthClient(conn)
			_, err = c.Check(context.Background(), &healthpb.HealthCheckRequest{})
			require.NoError(b, err)
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	connectBench := func(client *http.Client, contentType, body string) func(*testing.B) {
		return func(b *testing.B) {
			url := "http://" + ln.Addr().String() + "/grpc.health.v1.Health/Check"
			call := func() error {
				req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", contentType)
				req.Header.Set("Connect-Protocol-Version", "1")
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				return err
			}
			require.NoError(b, call())
			b.ResetTimer()
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("grpc/grpc-go-transport", grpcBench(ln.Addr().String()))
	b.Run("grpc/net-http-ServeHTTP", grpcBench(alt.Addr().String()))
	b.Run("connect-json/http1", connectBench(http1Client(nil), "application/json", "{}"))
	b.Run("connect-proto/h2c", connectBench(h2cClient(), "application/proto", ""))
}
