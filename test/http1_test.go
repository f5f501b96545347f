package test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/activities"
	"github.com/sw4rm/sw4rm-temporal/app"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/proto/toolpb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	tsdk "github.com/sw4rm/sw4rm-temporal/sdk/tool"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/tools"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// HTTP/1.1 end to end (§5.1: HTTP/1.1 is the fallback where HTTP/2 does not pass). Agents
// dial with sdk.WithHTTP1, whose transport cannot negotiate HTTP/2, and reach the server
// either directly or through h1Proxy, a reverse proxy that speaks only HTTP/1.1 on both sides
// — as the proxies this fallback exists for do — and that the test uses to cut every
// connection at once.

// h1KeepAlive is the test servers' SW4RM_STREAM_KEEPALIVE: short, so that idle streams get
// keep-alive items within the tests' time.
const h1KeepAlive = 200 * time.Millisecond

// h1Config is a test configuration with short stream keep-alives.
func h1Config(t *testing.T, kind string, mode auth.Mode) app.Config {
	cfg := authConfig(t, kind, mode)
	cfg.StreamKeepAlive = h1KeepAlive
	return cfg
}

// h1Proxy is an HTTP/1.1-only reverse proxy to the server's gRPC port. It streams responses
// as they come (FlushInterval -1), records the requests it forwards, and counts the empty
// messages — keep-alives — in the Connect streams it carries.
type h1Proxy struct {
	srv *httptest.Server

	mu       sync.Mutex
	upstream []net.Conn
	requests []*http.Request // clones, bodies not kept

	// notHTTP1 counts server responses that were not HTTP/1.1.
	notHTTP1 atomic.Int64
	// keepAlives counts empty messages in Connect stream responses, by path.
	keepAlives sync.Map // string → *atomic.Int64
}

func newH1Proxy(t *testing.T, target string) *h1Proxy {
	t.Helper()
	p := &h1Proxy{}
	u, err := url.Parse("http://" + target)
	require.NoError(t, err)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				p.mu.Lock()
				p.upstream = append(p.upstream, c)
				p.mu.Unlock()
			}
			return c, err
		},
		// HTTP/1.1 to the server and nothing else: no h2 attempt, no upgrade.
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConnsPerHost: 32,
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			p.mu.Lock()
			p.requests = append(p.requests, r.In.Clone(context.Background()))
			p.mu.Unlock()
		},
		Transport:     tr,
		FlushInterval: -1, // a stream's messages pass at once, not when a buffer fills
		ModifyResponse: func(resp *http.Response) error {
			if resp.ProtoMajor != 1 {
				p.notHTTP1.Add(1)
			}
			if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/connect+") {
				v, _ := p.keepAlives.LoadOrStore(resp.Request.URL.Path, new(atomic.Int64))
				resp.Body = &envelopeCounter{ReadCloser: resp.Body, empty: v.(*atomic.Int64)}
			}
			return nil
		},
		ErrorLog: log.New(io.Discard, "", 0), // a cut's aborted requests are expected
	}
	p.srv = httptest.NewUnstartedServer(rp)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	p.srv.Config.Protocols = &protocols
	p.srv.Start()
	t.Cleanup(func() { p.srv.Close(); tr.CloseIdleConnections() })
	return p
}

// addr is the proxy's host:port.
func (p *h1Proxy) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// cut closes every connection, to the clients and to the server, as a proxy restart would.
func (p *h1Proxy) cut() {
	p.srv.CloseClientConnections()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.upstream {
		_ = c.Close()
	}
	p.upstream = nil
}

// seen returns the requests forwarded to path.
func (p *h1Proxy) seen(path string) []*http.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*http.Request
	for _, r := range p.requests {
		if r.URL.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// keepAlivesOn is how many empty stream messages the responses of path carried.
func (p *h1Proxy) keepAlivesOn(path string) int64 {
	if v, ok := p.keepAlives.Load(path); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// envelopeCounter reads a Connect stream response (5-byte prefixes: flags, big-endian length)
// and counts its data messages of length 0.
type envelopeCounter struct {
	io.ReadCloser
	empty *atomic.Int64
	head  [5]byte
	got   int    // bytes of head read
	left  uint32 // bytes of the current message still to come
}

func (e *envelopeCounter) Read(b []byte) (int, error) {
	n, err := e.ReadCloser.Read(b)
	for i := 0; i < n; {
		if e.left > 0 {
			k := min(uint32(n-i), e.left)
			i += int(k)
			e.left -= k
			continue
		}
		e.head[e.got] = b[i]
		e.got++
		i++
		if e.got == len(e.head) {
			e.got = 0
			e.left = binary.BigEndian.Uint32(e.head[1:])
			if e.left == 0 && e.head[0]&2 == 0 { // 2: the end-of-stream message
				e.empty.Add(1)
			}
		}
	}
	return n, err
}

// h1Agent dials addr over HTTP/1.1 as a new agent and registers it; signed, it signs every
// call with a key of its own and registers that key.
func h1Agent(t *testing.T, addr, name string, signed bool) *sdk.Agent {
	t.Helper()
	opts := []grpc.DialOption{sdk.WithHTTP1(), sdk.WithoutSigning()}
	if signed {
		_, priv, err := ed25519.GenerateKey(nil)
		require.NoError(t, err)
		opts = append(opts, sdk.WithSigningKey(priv))
	}
	a, err := sdk.Dial(addr, uniq(t, name), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	assert.Nil(t, a.Conn(), "no gRPC connection")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, a.Register(ctx, &registrypb.AgentDescriptor{
		Name: name, Description: "HTTP/1.1 test agent " + name, Capabilities: []string{"test"},
		CommunicationClass: commonpb.CommunicationClass_STANDARD, ModalitiesSupported: []string{"application/json"},
	}))
	return a
}

// resumingInbox reads an agent's stream in the background and, whenever the stream breaks,
// opens it again after the last seq it confirmed (sw4rm-resume-after), as an agent that
// tracks its offset does. Every delivery goes to ch and is remembered.
type resumingInbox struct {
	ch    chan *sdk.Delivery
	opens atomic.Int32
	mu    sync.Mutex
	ids   []string // message_id of every delivery, in order
	// confirmed holds the seqs next confirmed; offset is the highest. A delivery seen but
	// not confirmed when the stream broke comes again on the resumed one.
	confirmed map[int64]bool
	offset    int64
}

func openResumingInbox(t *testing.T, a *sdk.Agent) *resumingInbox {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	in := &resumingInbox{ch: make(chan *sdk.Delivery, 256), confirmed: map[int64]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var st *sdk.Stream
			var err error
			in.mu.Lock()
			last := in.offset
			in.mu.Unlock()
			if last > 0 {
				st, err = a.ResumeAfter(ctx, last)
			} else {
				st, err = a.Receive(ctx)
			}
			if err == nil {
				in.opens.Add(1)
				for {
					d, err := st.Next()
					if err != nil {
						break
					}
					in.mu.Lock()
					in.ids = append(in.ids, d.Envelope.GetMessageId())
					in.mu.Unlock()
					select {
					case in.ch <- d:
					case <-ctx.Done():
					}
				}
				st.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return in
}

// next waits for the delivery keep matches, confirming (AckDelivery) every one it passes.
func (in *resumingInbox) next(t *testing.T, keep func(*sdk.Delivery) bool) *sdk.Delivery {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case d := <-in.ch:
			in.mu.Lock()
			again := in.confirmed[d.Seq]
			in.mu.Unlock()
			if again {
				continue // seen before the stream broke, confirmed since
			}
			rec, err := d.Confirm(context.Background())
			require.NoError(t, err)
			require.True(t, rec, "AckDelivery of seq %d recorded", d.Seq)
			in.mu.Lock()
			in.confirmed[d.Seq] = true
			in.offset = max(in.offset, d.Seq)
			in.mu.Unlock()
			if keep(d) {
				return d
			}
		case <-deadline:
			t.Fatal("timed out waiting for a delivery")
			return nil
		}
	}
}

// times is how many deliveries had message id.
func (in *resumingInbox) times(id string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for _, s := range in.ids {
		if s == id {
			n++
		}
	}
	return n
}

func messageID(id string) func(*sdk.Delivery) bool {
	return func(d *sdk.Delivery) bool { return d.Envelope.GetMessageId() == id }
}

// TestHTTP1ThroughProxy runs an agent's life over HTTP/1.1 only, through a proxy that
// speaks nothing else, on both stores, with authentication off and required (every call
// signed, the signature over the Connect body): register, send, the inbound stream
// delivering; then the proxy cuts every connection and the stream resumes after its last
// seq with nothing lost; AckDelivery and ACKs; a task submitted and its RUN delivered to an
// agent whose Serve loop reconnected by itself; a HITL decision; a tool stream cancelled.
func TestHTTP1ThroughProxy(t *testing.T) {
	for _, kind := range storeKinds {
		for _, mode := range []auth.Mode{auth.Off, auth.Required} {
			t.Run(kind+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				sys := start(t, h1Config(t, kind, mode))
				proxy := newH1Proxy(t, sys.app.GRPCAddr())
				signed := mode == auth.Required
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // a hang fails, not stalls CI
				defer cancel()

				// Register, send, deliver.
				a := h1Agent(t, proxy.addr(), "a", signed)
				aIn := openResumingInbox(t, a)
				waitState(t, sys, a.ID(), commonpb.AgentState_RUNNABLE)
				b := h1Agent(t, proxy.addr(), "b", signed)
				bIn := openResumingInbox(t, b)
				aIn.next(t, registryEvent(activities.AgentJoined, b.ID()))
				m1, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":1}`)})
				require.NoError(t, err)
				d1 := bIn.next(t, messageID(m1.GetMessageId()))
				assert.JSONEq(t, `{"n":1}`, string(d1.Envelope.GetPayload()))
				aIn.next(t, ackFor(m1.GetMessageId(), commonpb.AckStage_RECEIVED))
				require.NoError(t, d1.Ack(ctx, commonpb.AckStage_READ, 0, ""))
				aIn.next(t, ackFor(m1.GetMessageId(), commonpb.AckStage_READ))

				// A task agent whose Serve loop runs through the proxy too.
				worker := h1Agent(t, proxy.addr(), "worker", signed)
				runs := make(chan string, 4)
				serve(t, worker, func(_ context.Context, run *sdk.TaskRun) ([]byte, error) {
					runs <- run.Task().ID
					return []byte("done " + run.Task().ID), nil
				})
				waitState(t, sys, worker.ID(), commonpb.AgentState_RUNNABLE)

				// The proxy cuts every connection; what is sent meanwhile is not lost.
				bOpens, aOpens := bIn.opens.Load(), aIn.opens.Load()
				proxy.cut()
				time.Sleep(100 * time.Millisecond) // the clients see their pooled connections close
				m2, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":2}`)})
				require.NoError(t, err)
				m3, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"n":3}`)})
				require.NoError(t, err)
				d2 := bIn.next(t, messageID(m2.GetMessageId()))
				d3 := bIn.next(t, messageID(m3.GetMessageId()))
				assert.Greater(t, d3.Seq, d2.Seq)
				assert.Greater(t, d2.Seq, d1.Seq)
				assert.Greater(t, bIn.opens.Load(), bOpens, "b's stream was cut and opened again")
				for _, m := range []*commonpb.Envelope{m1, m2, m3} {
					assert.Equal(t, 1, bIn.times(m.GetMessageId()), "%s delivered once", m.GetMessageId())
				}
				resumed := 0
				for _, r := range proxy.seen(routerpb.RouterService_StreamIncoming_FullMethodName) {
					if r.Header.Get(wire.ResumeAfterKey) != "" {
						resumed++
					}
				}
				assert.GreaterOrEqual(t, resumed, 2, "a's and b's streams resumed with %s", wire.ResumeAfterKey)

				// ACKs after the cut reach a's resumed stream.
				require.NoError(t, d3.Ack(ctx, commonpb.AckStage_FULFILLED, 0, ""))
				aIn.next(t, ackFor(m3.GetMessageId(), commonpb.AckStage_FULFILLED))
				assert.Greater(t, aIn.opens.Load(), aOpens, "a's stream was cut and opened again")

				// A task: its RUN reaches the worker, whose Serve loop reconnected by itself.
				taskID := uniq(t, "task")
				res, err := schedulerpb.NewSchedulerServiceClient(a.ClientConn()).SubmitTask(ctx, &schedulerpb.SubmitTaskRequest{
					AgentId: worker.ID(), TaskId: taskID, Scope: "repo:app path:src/http1/**", Params: []byte(`{"x":1}`), ContentType: "application/json"})
				require.NoError(t, err)
				require.True(t, res.GetAccepted(), res.GetReason())
				select {
				case id := <-runs:
					assert.Equal(t, taskID, id)
				case <-time.After(30 * time.Second):
					t.Fatal("the RUN never reached the worker")
				}
				assert.Equal(t, "done "+taskID, waitTask(t, sys, taskID, workflows.TaskCompleted).Result)

				// A HITL decision: a's Decide waits over HTTP/1.1 while an operator decides.
				decided := make(chan decideResult, 1)
				go func() {
					dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					defer cancel()
					ctxJSON, _ := json.Marshal(hitl.Context{Facts: []string{"asked over HTTP/1.1"}})
					dec, err := hitlpb.NewHitlServiceClient(a.ClientConn()).Decide(dctx, &hitlpb.HitlInvocation{
						ReasonType: commonpb.HitlReasonType_SECURITY_APPROVAL, Context: ctxJSON, ProposedActions: []string{"approve", "deny"}})
					decided <- decideResult{dec, err}
				}()
				var invocation string
				require.Eventually(t, func() bool {
					recs, err := sys.app.Store().HITL().ListInvocations(ctx, store.HITLFilter{Status: store.HITLPending})
					if err != nil || len(recs) == 0 {
						return false
					}
					invocation = recs[0].InvocationID
					return true
				}, 20*time.Second, 50*time.Millisecond)
				ops, err := sdk.Dial(proxy.addr(), uniq(t, "ops"), sdk.WithHTTP1(), sdk.WithoutSigning())
				require.NoError(t, err)
				defer func() { _ = ops.Close() }()
				_, err = hitladminpb.NewHitlAdminServiceClient(ops.ClientConn()).Decide(
					metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+authOperatorToken),
					&hitladminpb.DecideRequest{InvocationId: invocation, Decision: "approve", Rationale: "over HTTP/1.1"})
				require.NoError(t, err)
				dec := awaitDecision(t, decided)
				assert.Equal(t, "approve", dec.GetAction())
				assert.Equal(t, "over HTTP/1.1", dec.GetRationale())

				// A tool stream, cancelled mid-way.
				tc := tsdk.New(a)
				st, err := tc.Stream(ctx, tsdk.Call{ProviderID: tools.BuiltinProviderID, ToolName: "sleep", Args: map[string]any{"ms": 30000, "tick_ms": 50}})
				require.NoError(t, err)
				for want := uint64(1); want <= 2; want++ {
					f, err := st.Recv()
					require.NoError(t, err)
					require.Equal(t, want, f.GetFrameNo())
				}
				code, err := tc.Cancel(ctx, st.CallID())
				require.NoError(t, err)
				assert.Equal(t, "CANCELLED", code)
				var last *toolpb.ToolFrame
				for {
					f, err := st.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					require.NoError(t, err)
					last = f
				}
				require.NotNil(t, last)
				require.True(t, last.GetFinal())
				sum, err := tsdk.SummaryOf(last)
				require.NoError(t, err)
				assert.Equal(t, "cancelled", sum.Status)

				assert.Zero(t, proxy.notHTTP1.Load(), "the server answered the proxy in HTTP/1.1 only")
			})
		}
	}
}

// TestHTTP1StreamKeepAlive: a stream that stays silent longer than SW4RM_STREAM_KEEPALIVE
// gets keep-alive items over HTTP/1.1 — seen raw by a client on the SDK's HTTP/1.1 transport
// directly, and counted at the proxy on the SDK's own streams — and the SDK skips them:
// Stream.Next returns the next real delivery, a tool stream its real frames.
func TestHTTP1StreamKeepAlive(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, h1Config(t, kind, auth.Off))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// Raw, directly on the port: the keep-alive is an empty item.
			direct := h1Agent(t, sys.app.GRPCAddr(), "direct", false)
			sctx, stop := context.WithCancel(ctx)
			raw, err := routerpb.NewRouterServiceClient(direct.ClientConn()).StreamIncoming(sctx, &routerpb.StreamRequest{AgentId: direct.ID()})
			require.NoError(t, err)
			// The first comes at once, so that the stream's headers leave with it; the next
			// after the silence.
			keepAlive := func() {
				var item *routerpb.StreamItem
				for item == nil || item.GetMsg() != nil {
					item, err = raw.Recv()
					require.NoError(t, err)
				}
				assert.Zero(t, item.GetSeq(), "a keep-alive has seq 0")
			}
			keepAlive()
			start := time.Now()
			keepAlive()
			assert.GreaterOrEqual(t, time.Since(start), h1KeepAlive-50*time.Millisecond, "sent after the silence")
			stop()

			// Through the proxy: the SDK's stream gets keep-alives and skips them.
			proxy := newH1Proxy(t, sys.app.GRPCAddr())
			a := h1Agent(t, proxy.addr(), "a", false)
			b := h1Agent(t, proxy.addr(), "b", false)
			st, err := b.Receive(ctx)
			require.NoError(t, err)
			defer st.Close()
			got := make(chan *sdk.Delivery, 1)
			go func() {
				for {
					d, err := st.Next()
					if err != nil {
						close(got)
						return
					}
					if d.Envelope.GetMessageType() == commonpb.MessageType_DATA {
						got <- d
						return
					}
				}
			}()
			path := routerpb.RouterService_StreamIncoming_FullMethodName
			require.Eventually(t, func() bool { return proxy.keepAlivesOn(path) >= 3 }, 10*time.Second, 20*time.Millisecond,
				"the idle stream gets keep-alives")
			m, err := a.Send(ctx, sdk.Message{To: b.ID(), Payload: []byte(`{"after":"silence"}`)})
			require.NoError(t, err)
			select {
			case d, ok := <-got:
				require.True(t, ok, "the stream ended")
				assert.Equal(t, m.GetMessageId(), d.Envelope.GetMessageId(), "Next skipped the keep-alives")
				assert.Positive(t, d.Seq)
			case <-time.After(15 * time.Second):
				t.Fatal("no delivery after the silence")
			}

			// A tool that stays silent longer than the keep-alive: only its real frame comes.
			before := proxy.keepAlivesOn(toolpb.ToolService_CallStream_FullMethodName)
			ts, err := tsdk.New(a).Stream(ctx, tsdk.Call{ProviderID: tools.BuiltinProviderID, ToolName: "sleep",
				Args: map[string]any{"ms": int(4 * h1KeepAlive / time.Millisecond), "tick_ms": 60000}})
			require.NoError(t, err)
			var frames []uint64
			for {
				f, err := ts.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				frames = append(frames, f.GetFrameNo())
			}
			assert.Equal(t, []uint64{1}, frames, "the final frame alone; keep-alives skipped")
			assert.GreaterOrEqual(t, proxy.keepAlivesOn(toolpb.ToolService_CallStream_FullMethodName)-before, int64(2),
				"the silent tool stream got keep-alives")
		})
	}
}

// TestHTTP1ErrorsMatchGRPC: an error answered over HTTP/1.1 (the SDK's Connect transport,
// directly on the port) is the one gRPC answers — code, message, details and the
// sw4rm-error-code (or tool error code) trailer — for unary calls and for a stream.
func TestHTTP1ErrorsMatchGRPC(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			sys := start(t, h1Config(t, kind, auth.Off))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			overGRPC := dialRaw(t, sys)
			h1, err := sdk.Dial(sys.app.GRPCAddr(), uniq(t, "h1"), sdk.WithHTTP1(), sdk.WithoutSigning())
			require.NoError(t, err)
			defer func() { _ = h1.Close() }()
			overHTTP1 := h1.ClientConn()

			same := func(what string, call func(grpc.ClientConnInterface, *metadata.MD) error, trailerKeys ...string) {
				t.Helper()
				var tg, th metadata.MD
				eg, eh := call(overGRPC, &tg), call(overHTTP1, &th)
				require.Error(t, eg, what)
				sg, sh := status.Convert(eg), status.Convert(eh)
				assert.Equal(t, sg.Code(), sh.Code(), "%s: %v vs %v", what, eg, eh)
				assert.Equal(t, sg.Message(), sh.Message(), what)
				assert.Equal(t, detailTypes(sg), detailTypes(sh), "%s: the details", what)
				for _, k := range trailerKeys {
					require.NotEmpty(t, tg.Get(k), "%s: gRPC's trailer %v", what, tg)
					assert.Equal(t, tg.Get(k), th.Get(k), "%s: the %s trailer", what, k)
				}
			}
			same("Heartbeat of a malformed agent_id", func(cc grpc.ClientConnInterface, tr *metadata.MD) error {
				_, err := registrypb.NewRegistryServiceClient(cc).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: " bad id"}, grpc.Trailer(tr))
				return err
			}, wire.ErrorCodeTrailer)
			same("Heartbeat of an unknown agent", func(cc grpc.ClientConnInterface, tr *metadata.MD) error {
				_, err := registrypb.NewRegistryServiceClient(cc).Heartbeat(ctx, &registrypb.HeartbeatRequest{AgentId: "nobody-" + kind}, grpc.Trailer(tr))
				return err
			}, wire.ErrorCodeTrailer)
			same("a tool nobody offers", func(cc grpc.ClientConnInterface, tr *metadata.MD) error {
				_, err := toolpb.NewToolServiceClient(cc).Call(ctx, &toolpb.ToolCall{ProviderId: tools.BuiltinProviderID, ToolName: "no-such-tool"}, grpc.Trailer(tr))
				return err
			}, wire.ErrorCodeTrailer, wire.ToolErrorCodeTrailer)
			same("a stream of an agent never registered", func(cc grpc.ClientConnInterface, tr *metadata.MD) error {
				st, err := routerpb.NewRouterServiceClient(cc).StreamIncoming(ctx, &routerpb.StreamRequest{AgentId: "never-registered-" + kind})
				if err != nil {
					return err
				}
				_, err = st.Recv()
				*tr = st.Trailer()
				return err
			}, wire.ErrorCodeTrailer)
		})
	}
}

// detailTypes names the types of a status's details.
func detailTypes(st *status.Status) []string {
	var out []string
	for _, d := range st.Details() {
		out = append(out, fmt.Sprintf("%T", d))
	}
	return out
}
