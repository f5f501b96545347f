package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/proto/routerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
)

const (
	testAgentID = "agent-b"
	waitLimit   = 2 * time.Second
)

// fakeServer is an in-process router and registry: the test scripts the inbound stream and
// inspects what the agent confirmed, sent and reported.
type fakeServer struct {
	routerpb.UnimplementedRouterServiceServer
	registrypb.UnimplementedRegistryServiceServer

	push      chan *commonpb.Envelope
	endStream chan error

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced on every recorded call
	nextSeq    int64
	delivered  []*routerpb.DeliveryAckRequest // what the stream sent: seq and message_id
	confirms   []*routerpb.DeliveryAckRequest
	sent       []sentMsg
	heartbeats []*registrypb.HeartbeatRequest
	deregs     []*registrypb.DeregisterAgentRequest
	// refuse, when set, gives the reason to reject a message with ("" admits it).
	refuse func(*commonpb.Envelope) string
	// failSend, when set, gives the gRPC error to fail a SendMessage with (nil admits it);
	// the failed call is recorded in sent all the same, as it went over the wire.
	failSend func(*commonpb.Envelope) error
	// failStream, when set, gives the error to end a new stream with before it delivers
	// anything (nil serves it).
	failStream func() error
	streams    int // StreamIncoming calls
}

type sentMsg struct {
	to  string // the sw4rm-recipient metadata
	env *commonpb.Envelope
}

func newFakeServer() *fakeServer {
	return &fakeServer{push: make(chan *commonpb.Envelope, 64), endStream: make(chan error, 1), changed: make(chan struct{})}
}

// record runs fn under the lock and wakes the waiters.
func (f *fakeServer) record(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeServer) StreamIncoming(req *routerpb.StreamRequest, stream grpc.ServerStreamingServer[routerpb.StreamItem]) error {
	if req.GetAgentId() != testAgentID {
		return status.Errorf(codes.InvalidArgument, "stream for %q", req.GetAgentId())
	}
	var fail error
	f.record(func() {
		f.streams++
		if f.failStream != nil {
			fail = f.failStream()
		}
	})
	if fail != nil {
		return fail
	}
	for {
		select {
		case env := <-f.push:
			var seq int64
			f.record(func() {
				f.nextSeq++
				seq = f.nextSeq
				f.delivered = append(f.delivered, &routerpb.DeliveryAckRequest{Seq: seq, MessageId: env.GetMessageId()})
			})
			if err := stream.Send(&routerpb.StreamItem{Msg: env, Seq: seq}); err != nil {
				return err
			}
		case err := <-f.endStream:
			return err
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

func (f *fakeServer) AckDelivery(_ context.Context, req *routerpb.DeliveryAckRequest) (*routerpb.DeliveryAckResponse, error) {
	f.record(func() { f.confirms = append(f.confirms, req) })
	return &routerpb.DeliveryAckResponse{Recorded: true}, nil
}

func (f *fakeServer) SendMessage(ctx context.Context, req *routerpb.SendMessageRequest) (*routerpb.SendMessageResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	to := ""
	if v := md.Get(wire.RecipientKey); len(v) > 0 {
		to = v[0]
	}
	var (
		reason string
		fail   error
	)
	f.record(func() {
		f.sent = append(f.sent, sentMsg{to: to, env: req.GetMsg()})
		if f.failSend != nil {
			fail = f.failSend(req.GetMsg())
		}
		if f.refuse != nil {
			reason = f.refuse(req.GetMsg())
		}
	})
	if fail != nil {
		return nil, fail
	}
	if reason != "" {
		return &routerpb.SendMessageResponse{Accepted: false, Reason: reason}, nil
	}
	return &routerpb.SendMessageResponse{Accepted: true}, nil
}

func (f *fakeServer) Heartbeat(_ context.Context, req *registrypb.HeartbeatRequest) (*registrypb.HeartbeatResponse, error) {
	f.record(func() { f.heartbeats = append(f.heartbeats, req) })
	return &registrypb.HeartbeatResponse{Ok: true}, nil
}

func (f *fakeServer) DeregisterAgent(_ context.Context, req *registrypb.DeregisterAgentRequest) (*registrypb.DeregisterAgentResponse, error) {
	f.record(func() { f.deregs = append(f.deregs, req) })
	return &registrypb.DeregisterAgentResponse{Ok: true}, nil
}

// waitUntil waits, with a deadline, until cond holds; cond takes the lock itself.
func (f *fakeServer) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		// ch was taken before cond runs, so a change after cond is seen as ch closing.
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; the agent sent: %s", what, f.describe())
		}
	}
}

// indexedAck is an ACK the agent sent and its position among everything it sent.
type indexedAck struct {
	protocol.AckPayload
	index int
	to    string
	env   *commonpb.Envelope
}

// acksFor returns the ACKs of message id, in sending order.
func (f *fakeServer) acksFor(id string) []indexedAck {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []indexedAck
	for i, s := range f.sent {
		if s.env.GetMessageType() != commonpb.MessageType_ACKNOWLEDGEMENT {
			continue
		}
		a, perr := protocol.ParseAck(s.env)
		if perr != nil {
			panic(fmt.Sprintf("the agent sent an invalid ACK: %v", perr))
		}
		if a.AckForMessageID == id {
			out = append(out, indexedAck{AckPayload: a, index: i, to: s.to, env: s.env})
		}
	}
	return out
}

// waitAck waits for an ACK of id at stage and returns it.
func (f *fakeServer) waitAck(t *testing.T, id string, stage commonpb.AckStage) indexedAck {
	t.Helper()
	var got indexedAck
	f.waitUntil(t, fmt.Sprintf("%s ACK of %s", stage, id), func() bool {
		for _, a := range f.acksFor(id) {
			if a.Stage == stage {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

// sentControl is a CONTROL the agent addressed to someone.
type sentControl struct {
	protocol.Control
	index int
	to    string
	env   *commonpb.Envelope
}

func (f *fakeServer) controls() []sentControl {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sentControl
	for i, s := range f.sent {
		if s.env.GetMessageType() != commonpb.MessageType_CONTROL {
			continue
		}
		c, perr := protocol.ParseControl(s.env)
		if perr != nil {
			panic(fmt.Sprintf("the agent sent an invalid CONTROL: %v", perr))
		}
		out = append(out, sentControl{Control: c, index: i, to: s.to, env: s.env})
	}
	return out
}

func (f *fakeServer) describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, s := range f.sent {
		fmt.Fprintf(&b, "\n  %s to=%q %s", s.env.GetMessageType(), s.to, s.env.GetPayload())
	}
	return b.String()
}

// harness runs Serve against a fakeServer.
type harness struct {
	t      *testing.T
	f      *fakeServer
	net    *fakeTransport
	agent  *Agent
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve returned, after err is set
	err    error
	n      int // barriers so far

	logMu sync.Mutex
	logs  []string
}

// fakeTransport is the in-memory network between the agent and its fakeServer: restart
// kills the gRPC server, breaking every connection and stream as a server process dying
// would, and starts a new one for the same fakeServer.
type fakeTransport struct {
	f  *fakeServer
	mu sync.Mutex
	g  *grpc.Server
	l  *bufconn.Listener
}

func (n *fakeTransport) start() {
	l := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	routerpb.RegisterRouterServiceServer(g, n.f)
	registrypb.RegisterRegistryServiceServer(g, n.f)
	go func() { _ = g.Serve(l) }()
	n.mu.Lock()
	old := n.g
	n.g, n.l = g, l
	n.mu.Unlock()
	if old != nil {
		// After the swap, so that the agent's redial finds the new server at once.
		old.Stop()
	}
}

func (n *fakeTransport) dial(ctx context.Context, _ string) (net.Conn, error) {
	n.mu.Lock()
	l := n.l
	n.mu.Unlock()
	return l.DialContext(ctx)
}

func (n *fakeTransport) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.g.Stop()
}

// dialFake starts a fakeServer and dials it as testAgentID.
func dialFake(t *testing.T) (*fakeServer, *Agent) {
	f, _, agent := dialFakeTransport(t)
	return f, agent
}

// dialFakeTransport is dialFake that also returns the transport, to restart the server.
func dialFakeTransport(t *testing.T) (*fakeServer, *fakeTransport, *Agent) {
	t.Helper()
	f := newFakeServer()
	n := &fakeTransport{f: f}
	n.start()
	t.Cleanup(n.stop)

	agent, err := Dial("passthrough:///bufnet", testAgentID,
		grpc.WithContextDialer(n.dial), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = agent.Close() })
	return f, n, agent
}

func startServe(t *testing.T, h TaskHandler, opts *ServeOptions) *harness {
	t.Helper()
	f, n, agent := dialFakeTransport(t)
	hs := &harness{t: t, f: f, net: n, agent: agent, done: make(chan struct{})}
	o := ServeOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Logf == nil {
		o.Logf = func(format string, args ...any) {
			hs.logMu.Lock()
			defer hs.logMu.Unlock()
			hs.logs = append(hs.logs, fmt.Sprintf(format, args...))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	hs.cancel = cancel
	go func() {
		hs.err = agent.Serve(ctx, h, &o)
		close(hs.done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-hs.done:
		case <-time.After(waitLimit):
			t.Errorf("Serve did not return after its ctx was cancelled")
		}
	})
	return hs
}

// push puts env on the agent's stream.
func (h *harness) push(env *commonpb.Envelope) *commonpb.Envelope {
	h.f.push <- env
	return env
}

// control pushes a scheduler CONTROL.
func (h *harness) control(c protocol.Control) *commonpb.Envelope {
	env, err := protocol.NewControlEnvelope(uuid.NewString(), protocol.SchedulerID, c)
	require.NoError(h.t, err)
	return h.push(env)
}

// barrier waits until the loop handled everything pushed so far: Serve handles deliveries in
// order and sends their ACKs before it reads the next one, so once the "not running" answer
// to a PREEMPT_REQUEST for an unknown task arrived, every earlier ACK was sent.
func (h *harness) barrier() {
	h.t.Helper()
	h.n++
	env := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: fmt.Sprintf("barrier-%d", h.n)})
	a := h.f.waitAck(h.t, env.GetMessageId(), commonpb.AckStage_FULFILLED)
	require.Equal(h.t, noteNotRunning, a.Note)
}

// wait waits for Serve to return and returns its error.
func (h *harness) wait() error {
	h.t.Helper()
	select {
	case <-h.done:
		return h.err
	case <-time.After(waitLimit):
		h.t.Fatalf("Serve did not return")
		return nil
	}
}

// stop cancels Serve and checks that it returned ctx's error.
func (h *harness) stop() {
	h.t.Helper()
	h.cancel()
	require.ErrorIs(h.t, h.wait(), context.Canceled)
}

// assertAllConfirmed checks that every delivery the stream made was confirmed with its seq
// and message_id.
func (h *harness) assertAllConfirmed() {
	h.t.Helper()
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	require.NotEmpty(h.t, h.f.delivered)
	confirmed := map[int64]string{}
	for _, c := range h.f.confirms {
		assert.Equal(h.t, testAgentID, c.GetAgentId())
		assert.Equal(h.t, routerpb.DeliveryAckOutcome_DELIVERY_ACK_OUTCOME_DELIVERED, c.GetOutcome())
		confirmed[c.GetSeq()] = c.GetMessageId()
	}
	for _, d := range h.f.delivered {
		id, ok := confirmed[d.GetSeq()]
		if assert.True(h.t, ok, "delivery %d (%s) was never confirmed", d.GetSeq(), d.GetMessageId()) {
			assert.Equal(h.t, d.GetMessageId(), id, "delivery %d confirmed with the wrong message_id", d.GetSeq())
		}
	}
}

func (h *harness) logged(substr string) bool {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	for _, l := range h.logs {
		if strings.Contains(l, substr) {
			return true
		}
	}
	return false
}

// recv receives from ch with a deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// waitFor polls cond (a state local to the handler, invisible to the server) with a deadline.
func waitFor(ctx context.Context, cond func() bool) bool {
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func runControl(id string) protocol.Control {
	return protocol.Control{Type: protocol.ControlRun, TaskID: id}
}

func TestServeRunFulfilled(t *testing.T) {
	got := make(chan Task, 1)
	h := startServe(t, func(_ context.Context, run *TaskRun) ([]byte, error) {
		got <- run.Task()
		return []byte(`{"answer":42}`), nil
	}, nil)

	run := h.control(protocol.Control{Type: protocol.ControlRun, TaskID: "t1", Priority: -3, Params: []byte(`{"q":1}`),
		ParamsContentType: "application/json", Scope: "repo:x"})
	ack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, `{"answer":42}`, ack.Note)
	assert.Equal(t, commonpb.ErrorCode_ERROR_CODE_UNSPECIFIED, ack.ErrorCode)
	assert.Equal(t, "", ack.to, "ACKs are routed by ack_for_message_id, not addressed")
	assert.Equal(t, testAgentID, ack.env.GetProducerId())
	assert.Equal(t, protocol.TaskCorrelationID("t1"), ack.env.GetCorrelationId())
	assert.Equal(t, Task{ID: "t1", Priority: -3, Params: []byte(`{"q":1}`), ContentType: "application/json", Scope: "repo:x"},
		recv(t, got, "the handler"))

	h.barrier()
	assert.Len(t, h.f.acksFor(run.GetMessageId()), 1, "one ACK per RUN")
	h.assertAllConfirmed()
	h.stop()
}

// C.4: RUN, PREEMPT_REQUEST, yield at a safe point, resume with a new RUN.
func TestServeCooperativePreemption(t *testing.T) {
	started := make(chan struct{}, 1)
	yielded := make(chan error, 1)
	pendingAtYield := make(chan bool, 1)
	resumed := make(chan Task, 1)
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		if run.Task().Resumed {
			resumed <- run.Task()
			return []byte("resumed and done"), nil
		}
		started <- struct{}{}
		for {
			if err := run.SafePoint(); err != nil {
				pendingAtYield <- run.PreemptPending()
				yielded <- err
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}, nil)

	run := h.control(runControl("low"))
	recv(t, started, "the task to start")
	preempt := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "low", Reason: "higher priority task"})
	ack := h.f.waitAck(t, preempt.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, noteYielded, ack.Note)
	err := recv(t, yielded, "the yield")
	assert.ErrorIs(t, err, ErrPreempted)
	assert.Contains(t, err.Error(), "higher priority task")
	assert.True(t, recv(t, pendingAtYield, "PreemptPending"))

	h.barrier()
	assert.Empty(t, h.f.acksFor(run.GetMessageId()), "a yielded task's RUN stays unanswered until the task is resumed")
	assert.Len(t, h.f.acksFor(preempt.GetMessageId()), 1)

	// The agent is free again, and the resumed run is told so.
	resume := h.control(protocol.Control{Type: protocol.ControlRun, TaskID: "low", Resume: true})
	ack = h.f.waitAck(t, resume.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, "resumed and done", ack.Note)
	assert.True(t, recv(t, resumed, "the resumed run").Resumed)
	h.assertAllConfirmed()
	h.stop()
}

func TestNonPreemptibleDefersPreemption(t *testing.T) {
	started := make(chan struct{}, 1)
	type inside struct {
		pending   bool
		safePoint error
	}
	insideCh := make(chan inside, 1)
	sectionErr := make(chan error, 1)
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		started <- struct{}{}
		err := run.NonPreemptible(ctx, 1500*time.Millisecond, func(ctx context.Context) error {
			// The PREEMPT_REQUEST arrives while the section is open.
			pending := waitFor(ctx, run.PreemptPending)
			insideCh <- inside{pending: pending, safePoint: run.SafePoint()}
			return nil
		})
		sectionErr <- err
		if err != nil {
			return nil, err
		}
		return nil, run.SafePoint()
	}, nil)

	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")
	// Wait for the BEGIN so that the PREEMPT_REQUEST surely arrives inside the section.
	h.f.waitUntil(t, "NON_PREEMPTIBLE_BEGIN", func() bool { return len(h.f.controls()) >= 1 })
	preempt := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "t1"})
	in := recv(t, insideCh, "the section")
	assert.True(t, in.pending, "the PREEMPT_REQUEST reached the run")
	assert.NoError(t, in.safePoint, "SafePoint does not report preemption inside a non-preemptible section")
	assert.NoError(t, recv(t, sectionErr, "NonPreemptible"))

	ack := h.f.waitAck(t, preempt.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, noteYielded, ack.Note, "after the section the next safe point yields")

	cs := h.f.controls()
	require.Len(t, cs, 2)
	begin, end := cs[0], cs[1]
	assert.Equal(t, protocol.ControlNonPreemptibleBegin, begin.Type)
	assert.Equal(t, int64(1500), begin.MaxDurationMS)
	assert.Equal(t, protocol.ControlNonPreemptibleEnd, end.Type)
	for _, c := range cs {
		assert.Equal(t, "t1", c.TaskID)
		assert.Equal(t, protocol.SchedulerID, c.to)
		assert.Equal(t, testAgentID, c.env.GetProducerId())
		assert.Equal(t, protocol.TaskCorrelationID("t1"), c.env.GetCorrelationId())
		assert.NotEmpty(t, c.env.GetMessageId())
		assert.NotZero(t, c.env.GetSequenceNumber())
	}
	assert.NotEqual(t, begin.env.GetMessageId(), end.env.GetMessageId())
	assert.Greater(t, end.env.GetSequenceNumber(), begin.env.GetSequenceNumber())
	assert.Less(t, end.index, ack.index, "the task yields only after the section ended")

	h.barrier()
	assert.Empty(t, h.f.acksFor(run.GetMessageId()))
	h.assertAllConfirmed()
	h.stop()
}

func TestNonPreemptibleNeedsABound(t *testing.T) {
	r := &TaskRun{}
	for _, d := range []time.Duration{0, -time.Second, protocol.MaxNonPreemptible + time.Millisecond} {
		called := false
		err := r.NonPreemptible(context.Background(), d, func(context.Context) error { called = true; return nil })
		assert.Error(t, err, "max duration %s", d)
		assert.False(t, called, "fn must not run without a valid bound (%s)", d)
	}
}

func TestNonPreemptibleEndsOnPanicAndError(t *testing.T) {
	boom := errors.New("fn failed")
	type outcome struct {
		panicked any
		err      error
		nested   error
	}
	out := make(chan outcome, 1)
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		var o outcome
		func() {
			defer func() { o.panicked = recover() }()
			_ = run.NonPreemptible(ctx, time.Second, func(context.Context) error { panic("boom") })
		}()
		// A sub-millisecond bound is rounded up, never sent as the invalid 0; a nested section
		// runs inside the outer one without a declaration of its own.
		o.err = run.NonPreemptible(ctx, 250*time.Microsecond, func(ctx context.Context) error {
			o.nested = run.NonPreemptible(ctx, time.Minute, func(context.Context) error { return nil })
			return boom
		})
		out <- o
		return []byte("ok"), nil
	}, nil)

	run := h.control(runControl("t1"))
	h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FULFILLED)
	o := recv(t, out, "the handler")
	assert.Equal(t, "boom", o.panicked, "the panic propagates out of NonPreemptible")
	assert.ErrorIs(t, o.err, boom)
	assert.NoError(t, o.nested)

	var got []string
	for _, c := range h.f.controls() {
		got = append(got, fmt.Sprintf("%s/%d", c.Type, c.MaxDurationMS))
	}
	assert.Equal(t, []string{
		protocol.ControlNonPreemptibleBegin + "/1000", protocol.ControlNonPreemptibleEnd + "/0",
		protocol.ControlNonPreemptibleBegin + "/1", protocol.ControlNonPreemptibleEnd + "/0",
	}, got)
	h.assertAllConfirmed()
	h.stop()
}

// C.5, the agent responds: TERMINATE cancels the task's ctx and the task stops within grace.
func TestServeTerminateWithinGrace(t *testing.T) {
	started := make(chan struct{}, 1)
	type seen struct{ safePoint, cause error }
	seenCh := make(chan seen, 1)
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		seenCh <- seen{safePoint: run.SafePoint(), cause: context.Cause(ctx)}
		return nil, ctx.Err()
	}, nil)

	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")
	term := h.control(protocol.Control{Type: protocol.ControlTerminate, TaskID: "t1", GraceMS: 1000, Reason: "non-preemptible timeout"})
	tack := h.f.waitAck(t, term.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, noteTerminated, tack.Note)
	rack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FAILED)
	assert.Equal(t, commonpb.ErrorCode_FORCED_PREEMPTION, rack.ErrorCode)

	s := recv(t, seenCh, "the handler")
	assert.ErrorIs(t, s.safePoint, context.Canceled, "SafePoint reports termination as the ctx error")
	assert.ErrorIs(t, s.cause, errTerminated)
	h.barrier()
	assert.Len(t, h.f.acksFor(run.GetMessageId()), 1)
	assert.Len(t, h.f.acksFor(term.GetMessageId()), 1)
	h.assertAllConfirmed()
	h.stop()
}

// C.5, the agent does not respond: no TERMINATE ACK after the grace period, KILL abandons it.
func TestServeTerminateIgnoredThenKill(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	release := make(chan struct{})
	returned := make(chan struct{})
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		if run.Task().ID != "hung" {
			return []byte("next task done"), nil
		}
		<-ctx.Done()
		cancelled <- struct{}{}
		<-release // ignores its ctx
		defer close(returned)
		return []byte("too late"), nil
	}, nil)

	run := h.control(runControl("hung"))
	term := h.control(protocol.Control{Type: protocol.ControlTerminate, TaskID: "hung", GraceMS: 20})
	recv(t, cancelled, "TERMINATE to cancel the task's ctx")
	// Absence can only be observed over time: let the grace period pass.
	time.Sleep(120 * time.Millisecond)
	h.barrier()
	assert.Empty(t, h.f.acksFor(term.GetMessageId()), "no TERMINATE ACK while the task has not stopped")
	assert.Empty(t, h.f.acksFor(run.GetMessageId()))

	kill := h.control(protocol.Control{Type: protocol.ControlKill, TaskID: "hung"})
	kack := h.f.waitAck(t, kill.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, noteKilled, kack.Note)

	// The abandoned task returns eventually; nothing is acknowledged for it.
	close(release)
	recv(t, returned, "the abandoned handler to return")
	next := h.control(runControl("next"))
	nack := h.f.waitAck(t, next.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, "next task done", nack.Note, "the agent takes new work after a KILL")
	h.barrier()
	assert.Empty(t, h.f.acksFor(term.GetMessageId()))
	assert.Empty(t, h.f.acksFor(run.GetMessageId()), "a killed task is never acknowledged")
	h.assertAllConfirmed()
	h.stop()
}

// A task that stops after the grace period but before KILL fails with forced_preemption; the
// TERMINATE stays unanswered.
func TestServeTerminateLateReturn(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	release := make(chan struct{})
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		<-ctx.Done()
		cancelled <- struct{}{}
		<-release
		return nil, ctx.Err()
	}, nil)

	run := h.control(runControl("t1"))
	term := h.control(protocol.Control{Type: protocol.ControlTerminate, TaskID: "t1", GraceMS: 20})
	recv(t, cancelled, "TERMINATE to cancel the task's ctx")
	time.Sleep(120 * time.Millisecond) // past the grace period
	close(release)
	rack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FAILED)
	assert.Equal(t, commonpb.ErrorCode_FORCED_PREEMPTION, rack.ErrorCode)
	kill := h.control(protocol.Control{Type: protocol.ControlKill, TaskID: "t1"})
	assert.Equal(t, noteNotRunning, h.f.waitAck(t, kill.GetMessageId(), commonpb.AckStage_FULFILLED).Note)
	assert.Empty(t, h.f.acksFor(term.GetMessageId()))
	h.assertAllConfirmed()
	h.stop()
}

func TestServeHandlerErrors(t *testing.T) {
	h := startServe(t, func(_ context.Context, run *TaskRun) ([]byte, error) {
		switch run.Task().ID {
		case "plain":
			return nil, errors.New("boom")
		case "rejected":
			return nil, fmt.Errorf("calling the tool: %w", &RejectedError{Code: commonpb.ErrorCode_TOOL_TIMEOUT, Reason: "slow tool"})
		case "protocol":
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "bad params")
		case "stray-preempted":
			return nil, ErrPreempted // no PREEMPT_REQUEST is pending: an ordinary failure
		case "panic":
			panic("handler bug")
		}
		return nil, nil
	}, nil)

	for _, tc := range []struct {
		task string
		code commonpb.ErrorCode
		note string
	}{
		{"plain", commonpb.ErrorCode_INTERNAL_ERROR, "boom"},
		{"rejected", commonpb.ErrorCode_TOOL_TIMEOUT, "calling the tool: sw4rm: rejected: slow tool"},
		{"protocol", commonpb.ErrorCode_VALIDATION_ERROR, "bad params"}, // the code travels in its own field
		{"stray-preempted", commonpb.ErrorCode_INTERNAL_ERROR, ErrPreempted.Error()},
		{"panic", commonpb.ErrorCode_INTERNAL_ERROR, "sw4rm: task handler panicked: handler bug"},
	} {
		run := h.control(runControl(tc.task))
		ack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FAILED)
		assert.Equal(t, tc.code, ack.ErrorCode, tc.task)
		assert.Equal(t, tc.note, ack.Note, tc.task)
	}
	assert.True(t, h.logged("panicked"), "the panic is logged")
	h.assertAllConfirmed()
	h.stop()
}

func TestServeMalformedControlRejected(t *testing.T) {
	var calls atomic.Int32
	h := startServe(t, func(context.Context, *TaskRun) ([]byte, error) {
		calls.Add(1)
		return nil, nil
	}, nil)

	for _, tc := range []struct {
		payload string
		code    commonpb.ErrorCode
	}{
		{`not json`, commonpb.ErrorCode_VALIDATION_ERROR},
		{`{"type":"RUN"}`, commonpb.ErrorCode_VALIDATION_ERROR},
		{`{"type":"RUN","task_id":"t","priority":99}`, commonpb.ErrorCode_VALIDATION_ERROR},
		{`{"type":"RUN","task_id":"t","bogus":1}`, commonpb.ErrorCode_VALIDATION_ERROR},
		{`{"type":"DANCE","task_id":"t"}`, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE},
		{`{"type":"NON_PREEMPTIBLE_BEGIN","task_id":"t","max_duration_ms":5}`, commonpb.ErrorCode_UNSUPPORTED_MESSAGE_TYPE},
	} {
		env := h.push(&commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: protocol.SchedulerID, CorrelationId: "c",
			MessageType: commonpb.MessageType_CONTROL, ContentType: "application/json", Payload: []byte(tc.payload)})
		ack := h.f.waitAck(t, env.GetMessageId(), commonpb.AckStage_REJECTED)
		assert.Equal(t, tc.code, ack.ErrorCode, tc.payload)
		assert.NotEmpty(t, ack.Note, tc.payload)
	}
	h.barrier() // still serving
	assert.Zero(t, calls.Load(), "no malformed RUN reaches the handler")
	h.assertAllConfirmed()
	h.stop()
}

func TestServeHeartbeatAndOtherMessages(t *testing.T) {
	others := make(chan *commonpb.Envelope, 8)
	h := startServe(t, func(context.Context, *TaskRun) ([]byte, error) { return nil, nil }, &ServeOptions{
		OnMessage: func(_ context.Context, d *Delivery) { others <- d.Envelope },
	})

	h.push(&commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: protocol.SchedulerID, MessageType: commonpb.MessageType_HEARTBEAT})
	h.f.waitUntil(t, "a Heartbeat call", func() bool {
		h.f.mu.Lock()
		defer h.f.mu.Unlock()
		return len(h.f.heartbeats) > 0
	})
	h.f.mu.Lock()
	hb := h.f.heartbeats[0]
	h.f.mu.Unlock()
	assert.Equal(t, testAgentID, hb.GetAgentId())
	assert.Equal(t, commonpb.AgentState_AGENT_STATE_UNSPECIFIED, hb.GetState(), "liveness only")

	data := h.push(&commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "agent-a", MessageType: commonpb.MessageType_DATA, Payload: []byte("hi")})
	// A CONTROL from another agent is not the scheduler's: the application gets it.
	foreign := h.push(&commonpb.Envelope{MessageId: uuid.NewString(), ProducerId: "agent-a", MessageType: commonpb.MessageType_CONTROL,
		ContentType: "application/json", Payload: []byte(`{"type":"KILL","task_id":"x"}`)})
	assert.Equal(t, data.GetMessageId(), recv(t, others, "OnMessage").GetMessageId())
	assert.Equal(t, foreign.GetMessageId(), recv(t, others, "OnMessage").GetMessageId())
	h.barrier()
	assert.Empty(t, others, "the scheduler's HEARTBEAT and CONTROL are not handed to OnMessage")
	assert.Empty(t, h.f.acksFor(foreign.GetMessageId()))
	h.assertAllConfirmed()
	h.stop()
}

func TestServePreemptNotRunningAndCompleted(t *testing.T) {
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		if !waitFor(ctx, run.PreemptPending) {
			return nil, errors.New("no PREEMPT_REQUEST arrived")
		}
		return []byte("done anyway"), nil // finishes without reaching a safe point
	}, nil)

	unknown := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "nope"})
	assert.Equal(t, noteNotRunning, h.f.waitAck(t, unknown.GetMessageId(), commonpb.AckStage_FULFILLED).Note)

	run := h.control(runControl("t1"))
	preempt := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "t1"})
	rack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, "done anyway", rack.Note)
	pack := h.f.waitAck(t, preempt.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, noteCompleted, pack.Note)

	late := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "t1"})
	assert.Equal(t, noteNotRunning, h.f.waitAck(t, late.GetMessageId(), commonpb.AckStage_FULFILLED).Note)
	h.assertAllConfirmed()
	h.stop()
}

func TestServeRunWhileBusyRejected(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		calls.Add(1)
		select {
		case <-release:
			return []byte(run.Task().ID), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, nil)

	first := h.control(runControl("t1"))
	second := h.control(runControl("t2"))
	ack := h.f.waitAck(t, second.GetMessageId(), commonpb.AckStage_REJECTED)
	assert.Equal(t, commonpb.ErrorCode_ALREADY_IN_PROGRESS, ack.ErrorCode)
	close(release)
	assert.Equal(t, "t1", h.f.waitAck(t, first.GetMessageId(), commonpb.AckStage_FULFILLED).Note)
	assert.Equal(t, int32(1), calls.Load())
	h.assertAllConfirmed()
	h.stop()
}

// §8.4: SHUTDOWN refuses new tasks, lets the running one finish, then deregisters.
func TestServeShutdownLetsTaskFinish(t *testing.T) {
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		started <- struct{}{}
		select {
		case <-release:
			return []byte("finished"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, nil)

	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")
	shut := h.control(protocol.Control{Type: protocol.ControlShutdown, GraceMS: 5000, Reason: "maintenance"})
	refused := h.control(runControl("t2"))
	ack := h.f.waitAck(t, refused.GetMessageId(), commonpb.AckStage_REJECTED)
	assert.Equal(t, commonpb.ErrorCode_AGENT_SHUTDOWN, ack.ErrorCode)
	h.barrier()
	assert.Empty(t, h.f.acksFor(shut.GetMessageId()), "SHUTDOWN completes only after the task")
	h.f.mu.Lock()
	assert.Empty(t, h.f.deregs)
	h.f.mu.Unlock()

	close(release)
	require.NoError(t, h.wait())
	rack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Equal(t, "finished", rack.Note)
	sack := h.f.waitAck(t, shut.GetMessageId(), commonpb.AckStage_FULFILLED)
	assert.Less(t, rack.index, sack.index)
	h.f.mu.Lock()
	require.Len(t, h.f.deregs, 1)
	assert.Equal(t, testAgentID, h.f.deregs[0].GetAgentId())
	assert.Equal(t, "shutdown", h.f.deregs[0].GetReason())
	h.f.mu.Unlock()
	h.assertAllConfirmed()
}

// §8.4: a task that outlasts the grace period is cancelled and reported incomplete.
func TestServeShutdownGraceCancelsTask(t *testing.T) {
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}, nil)

	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")
	shut := h.control(protocol.Control{Type: protocol.ControlShutdown, GraceMS: 30})
	require.NoError(t, h.wait())
	rack := h.f.waitAck(t, run.GetMessageId(), commonpb.AckStage_FAILED)
	assert.Equal(t, commonpb.ErrorCode_AGENT_SHUTDOWN, rack.ErrorCode)
	assert.ErrorIs(t, recv(t, causes, "the cancellation"), errShuttingDown)
	h.f.waitAck(t, shut.GetMessageId(), commonpb.AckStage_FULFILLED)
	h.f.mu.Lock()
	assert.Len(t, h.f.deregs, 1)
	h.f.mu.Unlock()
	h.assertAllConfirmed()
}

func TestServeShutdownIdle(t *testing.T) {
	h := startServe(t, func(context.Context, *TaskRun) ([]byte, error) { return nil, nil }, nil)
	shut := h.control(protocol.Control{Type: protocol.ControlShutdown})
	require.NoError(t, h.wait())
	h.f.waitAck(t, shut.GetMessageId(), commonpb.AckStage_FULFILLED)
	h.f.mu.Lock()
	assert.Len(t, h.f.deregs, 1)
	h.f.mu.Unlock()
	h.assertAllConfirmed()
}

// Cancelling Serve's ctx cancels the task and Serve waits for the handler to return.
func TestServeCancelWaitsForHandler(t *testing.T) {
	started := make(chan struct{}, 1)
	var returned atomic.Bool
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a slow cleanup Serve must wait for
		returned.Store(true)
		return nil, ctx.Err()
	}, nil)

	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")
	h.stop()
	assert.True(t, returned.Load(), "Serve returned before the handler")
	assert.Empty(t, h.f.acksFor(run.GetMessageId()))
	h.assertAllConfirmed()
}

// A permanent stream error (here: the agent is not registered) ends Serve without reopening
// the stream; the running task is cancelled and not acknowledged.
func TestServePermanentStreamErrorEndsServe(t *testing.T) {
	started := make(chan struct{}, 1)
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}, nil)
	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")
	h.f.endStream <- status.Error(codes.NotFound, "no_route: agent is not registered")
	err := h.wait()
	require.Error(t, err)
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Empty(t, h.f.acksFor(run.GetMessageId()), "an interrupted task is not acknowledged")
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	assert.Equal(t, 1, h.f.streams, "a permanent error is not retried")
}

// A stream that keeps failing transiently ends Serve once ServeOptions.MaxOutage has passed.
func TestServeGivesUpAfterMaxOutage(t *testing.T) {
	f, agent := dialFake(t)
	f.failStream = func() error { return status.Error(codes.Unavailable, "internal_error: registry lookup failed") }
	begun := time.Now()
	err := agent.Serve(context.Background(), func(context.Context, *TaskRun) ([]byte, error) { return nil, nil },
		&ServeOptions{RetryBackoff: 10 * time.Millisecond, RetryMaxBackoff: 20 * time.Millisecond, MaxOutage: 200 * time.Millisecond})
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.GreaterOrEqual(t, time.Since(begun), 200*time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Greater(t, f.streams, 3, "the stream was reopened until the outage budget ran out")
}

// A stream that breaks while a task runs — the server ends it with Unavailable, closes it, or
// dies and comes back — is reopened; the task runs on, and preemption and the task's ACKs
// work over the new stream. The RUN, redelivered on the new stream because its confirmation
// was lost, is not run again.
func TestServeReconnectsWithRunningTask(t *testing.T) {
	started := make(chan struct{}, 1)
	var calls atomic.Int32
	h := startServe(t, func(ctx context.Context, run *TaskRun) ([]byte, error) {
		calls.Add(1)
		started <- struct{}{}
		if run.Task().Resumed {
			return []byte("resumed"), nil
		}
		for {
			if err := run.SafePoint(); err != nil {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}, &ServeOptions{RetryBackoff: 5 * time.Millisecond, RetryMaxBackoff: 20 * time.Millisecond})
	streams := func() int {
		h.f.mu.Lock()
		defer h.f.mu.Unlock()
		return h.f.streams
	}
	run := h.control(runControl("t1"))
	recv(t, started, "the task to start")

	breaks := []struct {
		name string
		do   func()
	}{
		{"the server ends the stream Unavailable", func() { h.f.endStream <- status.Error(codes.Unavailable, "frontend restarting") }},
		{"the server closes the stream", func() { h.f.endStream <- nil }},
		{"the server dies and comes back", h.net.start},
	}
	for i, b := range breaks {
		h.barrier() // the current stream is open and delivering
		b.do()
		h.f.waitUntil(t, "the stream to be reopened after "+b.name, func() bool { return streams() > i+1 })
		h.push(run) // what the server redelivers: the RUN's confirmation was lost
		h.barrier()
		select {
		case <-h.done:
			t.Fatalf("Serve returned after %s: %v", b.name, h.err)
		default:
		}
	}
	assert.Equal(t, int32(1), calls.Load(), "the redelivered RUN did not run again")
	assert.Empty(t, h.f.acksFor(run.GetMessageId()), "the task is still running")

	// The task's TaskRun still works on the new stream: it yields to a PREEMPT_REQUEST.
	pre := h.control(protocol.Control{Type: protocol.ControlPreemptRequest, TaskID: "t1", Reason: "urgent"})
	assert.Equal(t, noteYielded, h.f.waitAck(t, pre.GetMessageId(), commonpb.AckStage_FULFILLED).Note)
	resume := runControl("t1")
	resume.Resume = true
	again := h.control(resume)
	recv(t, started, "the task to resume")
	assert.Equal(t, "resumed", h.f.waitAck(t, again.GetMessageId(), commonpb.AckStage_FULFILLED).Note)
	assert.Empty(t, h.f.acksFor(run.GetMessageId()), "a yielded RUN stays open")
	assert.True(t, h.logged("reopening"), "the reconnects were logged")
	h.stop()
}

// An ACK that fails transiently is sent again with the same message_id (the server answers a
// repeated message_id with its recorded state, so the retry is idempotent) until it is
// delivered; a refusal, permanent, is not retried.
func TestServeRetriesAckWithSameMessageID(t *testing.T) {
	var failures atomic.Int32
	h := startServe(t, func(_ context.Context, run *TaskRun) ([]byte, error) {
		if run.Task().ID == "refused" {
			return nil, errors.New("boom")
		}
		return []byte("done"), nil
	}, &ServeOptions{RetryBackoff: 5 * time.Millisecond, RetryMaxBackoff: 20 * time.Millisecond})
	h.f.mu.Lock()
	h.f.failSend = func(env *commonpb.Envelope) error {
		if env.GetMessageType() == commonpb.MessageType_ACKNOWLEDGEMENT && failures.Add(1) <= 3 {
			if failures.Load() == 2 {
				return status.Error(codes.DeadlineExceeded, "the attempt timed out")
			}
			return status.Error(codes.Unavailable, "internal_error: the message could not be stored, retry")
		}
		return nil
	}
	h.f.refuse = func(env *commonpb.Envelope) string {
		if a, err := protocol.ParseAck(env); err == nil && a.Stage == commonpb.AckStage_FAILED {
			return "validation_error: refused for the test"
		}
		return ""
	}
	h.f.mu.Unlock()

	run := h.control(runControl("t1"))
	h.f.waitUntil(t, "the FULFILLED ACK to get through", func() bool { return failures.Load() > 3 })
	h.barrier()
	acks := h.f.acksFor(run.GetMessageId())
	require.Len(t, acks, 4, "three failed attempts and the one that got through")
	for _, a := range acks {
		assert.Equal(t, commonpb.AckStage_FULFILLED, a.Stage)
		assert.Equal(t, "done", a.Note)
		assert.Equal(t, acks[0].env.GetMessageId(), a.env.GetMessageId(), "every attempt has the same message_id")
		assert.Equal(t, acks[0].env.GetSequenceNumber(), a.env.GetSequenceNumber())
	}
	assert.True(t, h.logged("delivered after 3 failed attempts"))

	refused := h.control(runControl("refused"))
	h.f.waitAck(t, refused.GetMessageId(), commonpb.AckStage_FAILED)
	h.barrier()
	assert.Len(t, h.f.acksFor(refused.GetMessageId()), 1, "a refused ACK is not sent again")
	h.stop()
}

// A redelivered CONTROL (its confirmation was lost) is confirmed again but not run twice.
func TestServeDropsRedeliveredControl(t *testing.T) {
	var calls atomic.Int32
	h := startServe(t, func(context.Context, *TaskRun) ([]byte, error) {
		calls.Add(1)
		return []byte("once"), nil
	}, nil)
	env, err := protocol.NewControlEnvelope(uuid.NewString(), protocol.SchedulerID, runControl("t1"))
	require.NoError(t, err)
	h.push(env)
	h.f.waitAck(t, env.GetMessageId(), commonpb.AckStage_FULFILLED)
	h.push(env)
	h.barrier()
	assert.Equal(t, int32(1), calls.Load())
	assert.Len(t, h.f.acksFor(env.GetMessageId()), 1)
	h.assertAllConfirmed()
	h.stop()
}
