package test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// temporalProxy stands between one sw4rm process and the Temporal frontend, forwarding every
// gRPC call unchanged, so a test can take Temporal away from that process alone — the
// shared dev server keeps running for everyone else. While cut, calls in flight and new
// calls are answered with the status a restarting server gives.
type temporalProxy struct {
	addr     string
	upstream *grpc.ClientConn

	mu      sync.Mutex
	failure func(method string) *status.Status // nil while forwarding
	gen     context.Context                    // cancelled by cut, ending the calls in flight
	cancel  context.CancelFunc                 // cancels gen
}

// newTemporalProxy starts a proxy to the shared dev server and stops it when the test ends.
func newTemporalProxy(t *testing.T) *temporalProxy {
	t.Helper()
	up, err := grpc.NewClient(temporalAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &temporalProxy{addr: lis.Addr().String(), upstream: up}
	p.gen, p.cancel = context.WithCancel(context.Background())
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(p.forward))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		p.cancel()
		_ = up.Close()
	})
	return p
}

// cut makes every call, including those in flight, fail with the status fail gives for its
// method, until restore.
func (p *temporalProxy) cut(fail func(method string) *status.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failure = fail
	p.cancel()
}

// restore forwards calls again.
func (p *temporalProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failure = nil
	p.gen, p.cancel = context.WithCancel(context.Background())
}

func (p *temporalProxy) state() (func(string) *status.Status, context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failure, p.gen
}

// forward relays one unary call (the Temporal client makes no streaming calls).
func (p *temporalProxy) forward(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	var req []byte
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	failure, gen := p.state()
	if failure != nil {
		return failure(method).Err()
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(gen, cancel)
	defer stop()
	md, _ := metadata.FromIncomingContext(ss.Context())
	out := metadata.MD{}
	for k, v := range md {
		if !strings.HasPrefix(k, ":") && k != "content-type" && k != "user-agent" && !strings.HasPrefix(k, "grpc-") {
			out[k] = v
		}
	}
	var resp []byte
	var header, trailer metadata.MD
	err := p.upstream.Invoke(metadata.NewOutgoingContext(ctx, out), method, &req, &resp,
		grpc.ForceCodec(rawCodec{}), grpc.Header(&header), grpc.Trailer(&trailer))
	if failure, _ := p.state(); failure != nil && gen.Err() != nil {
		return failure(method).Err() // cut while in flight: the answer never arrives
	}
	_ = ss.SetHeader(header)
	ss.SetTrailer(trailer)
	if err != nil {
		return err
	}
	return ss.SendMsg(&resp)
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

// Name is "proto" so that the content type on the wire stays application/grpc+proto.
func (rawCodec) Name() string { return "proto" }

// restarting answers as a Temporal frontend does while it restarts: a call in flight or made
// meanwhile fails, and a wait on a workflow's result is told the workflow is not found while
// the history service has not loaded it yet. The SDK retries the Unavailable answers itself;
// the NotFound reaches the caller.
func restarting(method string) *status.Status {
	if strings.HasSuffix(method, "/GetWorkflowExecutionHistory") {
		return status.New(codes.NotFound, "workflow execution not found (the server is restarting)")
	}
	return status.New(codes.Unavailable, "connection refused (the server is restarting)")
}
