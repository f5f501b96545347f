package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// The environment of a handoff agent process (runHandoffAgent): the test binary started with
// handoffAgentAddrEnv set is that agent, not the suite.
const (
	// handoffAgentAddrEnv is the frontend the agent dials.
	handoffAgentAddrEnv = "SW4RM_FAULTS_HANDOFF_AGENT_ADDR"
	// handoffAgentIDEnv is the agent's id, the same in every process of the agent.
	handoffAgentIDEnv = "SW4RM_FAULTS_HANDOFF_AGENT_ID"
	// handoffAgentRequestEnv is the request_id of the handoff the agent takes.
	handoffAgentRequestEnv = "SW4RM_FAULTS_HANDOFF_REQUEST"
	// handoffAgentCompleteEnv set to 1 completes the handoff once accepted; otherwise the
	// agent holds it, working, until it is killed.
	handoffAgentCompleteEnv = "SW4RM_FAULTS_HANDOFF_COMPLETE"
)

// runHandoffAgent is the accepting agent as a process of its own, as an agent runs on an
// operator's machine: it registers, finds its handoff the way an agent restarting after a
// crash does — GetPendingHandoffs with sw4rm-handoff-include-accepted, which lists the offers
// waiting for it and the handoffs it accepted — accepts it (again, after a restart), and then
// either completes it or holds it until it is killed. Each step is a line on stdout, which
// the suite reads from the process's log. It returns the exit code.
func runHandoffAgent() int {
	addr, id, request := os.Getenv(handoffAgentAddrEnv), os.Getenv(handoffAgentIDEnv), os.Getenv(handoffAgentRequestEnv)
	complete := os.Getenv(handoffAgentCompleteEnv) == "1"
	fail := func(format string, args ...any) int {
		fmt.Printf("agent failed: "+format+"\n", args...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := dialRegistered(ctx, addr, id, &registrypb.AgentDescriptor{Name: "closer", Description: "fault suite handoff agent",
		Capabilities: []string{"refunds"}, ModalitiesSupported: []string{"application/json"}}, true)
	if err != nil {
		return fail("register: %v", err)
	}
	defer func() { _ = a.Close() }()
	fmt.Printf("registered agent=%s\n", id)

	hc := handoffpb.NewHandoffServiceClient(a.Conn())
	var found *handoffpb.HandoffRequest
	var state string
	// Listed within seconds when it is listed at all: a minute is a generous bound.
	lctx, lcancel := context.WithTimeout(ctx, time.Minute)
	defer lcancel()
	err = waitCtx(lctx, 100*time.Millisecond, func() bool {
		var hdr metadata.MD
		cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, wire.HandoffIncludeAcceptedKey, "true"), 10*time.Second)
		defer ccancel()
		resp, err := hc.GetPendingHandoffs(cctx, &handoffpb.GetPendingHandoffsRequest{AgentId: id}, grpc.Header(&hdr))
		if err != nil {
			return false
		}
		states := hdr.Get(wire.HandoffStateHeader)
		for i, r := range resp.GetPendingRequests() {
			if r.GetRequestId() == request {
				found, state = r, "unknown"
				if i < len(states) {
					state = states[i]
				}
				return true
			}
		}
		return false
	})
	if err != nil {
		return fail("handoff %s never listed", request)
	}
	sum := sha256.Sum256(found.GetContextSnapshot())
	fmt.Printf("found request=%s state=%s snapshot_sha256=%s\n", request, state, hex.EncodeToString(sum[:]))

	var hdr metadata.MD
	if _, err := hc.AcceptHandoff(ctx, &handoffpb.HandoffResponse{RequestId: request, Accepted: true, AcceptingAgent: id}, grpc.Header(&hdr)); err != nil {
		return fail("accept %s: %v", request, err)
	}
	fmt.Printf("accepted request=%s state=%s complete_by=%s\n", request, strings.Join(hdr.Get(wire.HandoffStateHeader), ","),
		strings.Join(hdr.Get(wire.HandoffCompleteByHeader), ","))
	if !complete {
		fmt.Println("working")
		<-ctx.Done()
		return fail("still holding %s: nobody killed the agent", request)
	}
	res, err := hc.CompleteHandoff(ctx, &handoffpb.CompleteHandoffRequest{RequestId: request, Status: handoffpb.HandoffStatus_COMPLETED})
	if err != nil || !res.GetSuccess() {
		return fail("complete %s: %v %s", request, err, res.GetMessage())
	}
	fmt.Printf("completed request=%s\n", request)
	return 0
}

// handoffAgent is one run of runHandoffAgent, started from the suite's own test binary.
func startHandoffAgent(t *testing.T, dir, addr, id, request string, complete bool) *proc {
	t.Helper()
	env := cleanEnv(handoffAgentAddrEnv+"="+addr, handoffAgentIDEnv+"="+id, handoffAgentRequestEnv+"="+request)
	if complete {
		env = append(env, handoffAgentCompleteEnv+"=1")
	}
	return startAgentProc(t, dir, id, env)
}

// handoffEvents collects the handoff NOTIFICATIONs an agent receives, by request_id.
type handoffEvents struct {
	mu      sync.Mutex
	streams int
	byID    map[string][]handoffEvent
}

// handoffEvent is the JSON of a handoff NOTIFICATION (docs/handoff.md).
type handoffEvent struct {
	Event      string `json:"event"`
	RequestID  string `json:"request_id"`
	Reason     string `json:"reason"`
	CompleteBy string `json:"complete_by"`
}

func (e *handoffEvents) handle(ctx context.Context, d *sdk.Delivery) bool {
	var ev handoffEvent
	if d.Envelope.GetMessageType() == commonpb.MessageType_NOTIFICATION && d.DecodeJSON(&ev) == nil && ev.RequestID != "" {
		e.mu.Lock()
		e.byID[ev.RequestID] = append(e.byID[ev.RequestID], ev)
		e.mu.Unlock()
	}
	_, err := d.Confirm(ctx)
	return err == nil
}

// seen returns the events of request in the order received.
func (e *handoffEvents) seen(request string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.byID[request] {
		out = append(out, ev.Event)
	}
	return out
}

// last returns the last event of request named event.
func (e *handoffEvents) last(request, event string) (handoffEvent, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	evs := e.byID[request]
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Event == event {
			return evs[i], true
		}
	}
	return handoffEvent{}, false
}

// TestHandoffAgentKilled: one `sw4rm server` and one `sw4rm worker` on PostgreSQL and
// Temporal; an originator hands two tickets, each to an agent running as a process of its
// own. Both agents accept and are killed with SIGKILL while holding the work. The first is
// started again: the new process finds the handoff it accepted with its context snapshot
// (GetPendingHandoffs with sw4rm-handoff-include-accepted), accepts it again and completes
// it — the originator is told and fenced. The second never comes back: its handoff expires
// at the completion deadline its request's budget set, and the originator is told why and
// keeps the correlation. No handoff is left ACCEPTED (docs/handoff.md, "Completion deadline
// and recovery").
func TestHandoffAgentKilled(t *testing.T) {
	dir := t.TempDir()
	d := startDeployment(t, dir, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	origin := dialAgent(t, d.server.addr, agentID("triage"))
	register(t, origin, "triage")
	events := &handoffEvents{byID: map[string][]handoffEvent{}}
	stopReader := streamReader{agent: origin, reset: make(chan struct{}), mu: &events.mu, streams: &events.streams, handle: events.handle}.start(ctx)
	hc := handoffpb.NewHandoffServiceClient(origin.Conn())

	type ticket struct {
		agent, request, corr string
		snapshot             []byte
		budget               *handoffpb.BudgetEnvelope
		proc                 *proc
	}
	tickets := []*ticket{
		{agent: agentID("closer"), budget: nil},
		// Budgeted: 20 s of wall time from the request, enough to be accepted in, far less
		// than the default hour, so that the suite sees the expiry.
		{agent: agentID("lost"), budget: &handoffpb.BudgetEnvelope{WallTimeRemainingMs: 20_000}},
	}
	for i, tk := range tickets {
		tk.request = "refund-" + uuid.NewString()[:8]
		tk.corr = "ticket-" + tk.request
		tk.snapshot = fmt.Appendf(nil, `{"ticket":%d,"notes":"refund half done","nonce":%q}`, 40+i, uuid.NewString())
		tk.proc = startHandoffAgent(t, dir, d.server.addr, tk.agent, tk.request, false)
		marker := "---- " + "agent-" + tk.agent + " start"
		if err := waitFor(time.Minute, 50*time.Millisecond, func() bool { return logContains(tk.proc.log, marker, "registered agent=") }); err != nil {
			t.Fatalf("%s never registered:\n%s", tk.agent, tail(tk.proc.log, 20))
		}
		req := &handoffpb.HandoffRequest{RequestId: tk.request, FromAgent: origin.ID(), ToAgent: tk.agent, Reason: "refund needs the closer",
			ContextSnapshot: tk.snapshot, Timeout: durationpb.New(time.Minute), Budget: tk.budget}
		rctx, rcancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, wire.CorrelationIDKey, tk.corr), 10*time.Second)
		_, err := hc.RequestHandoff(rctx, req)
		rcancel()
		if err != nil {
			t.Fatalf("RequestHandoff %s: %v", tk.request, err)
		}
	}
	f := figures{scenario: "handoff-agent-kill"}
	for _, tk := range tickets {
		marker := "---- " + "agent-" + tk.agent + " start"
		if err := waitFor(time.Minute, 50*time.Millisecond, func() bool { return logContains(tk.proc.log, marker, "working") }); err != nil {
			t.Fatalf("%s never accepted %s:\n%s", tk.agent, tk.request, tail(tk.proc.log, 20))
		}
		f.accepted++
		tk.proc.kill()
	}

	// The closer comes back: a new process of the same agent recovers the handoff and
	// completes it.
	closer := tickets[0]
	restarted := startHandoffAgent(t, dir, d.server.addr, closer.agent, closer.request, true)
	select {
	case <-restarted.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the restarted %s did not finish:\n%s", closer.agent, tail(restarted.log, 20))
	}
	marker := "---- agent-" + closer.agent + " start"
	sum := sha256.Sum256(closer.snapshot)
	switch {
	case restarted.err != nil:
		f.problem("the restarted %s failed (%v): %s", closer.agent, restarted.err, tail(restarted.log, 5))
	case !logContains(restarted.log, marker, fmt.Sprintf("found request=%s state=ACCEPTED snapshot_sha256=%s", closer.request, hex.EncodeToString(sum[:]))):
		f.lost++
		f.problem("the restarted %s did not recover its accepted handoff's snapshot: %s", closer.agent, tail(restarted.log, 5))
	}

	// state waits until a handoff's workflow has ended and returns its final state.
	state := func(request string) workflows.HandoffState {
		var st workflows.HandoffState
		_ = waitFor(time.Minute, 250*time.Millisecond, func() bool {
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			defer qcancel()
			v, err := d.ts.client.QueryWorkflow(qctx, workflows.HandoffWorkflowID(request), "", workflows.HandoffStateQuery)
			return err == nil && v.Get(&st) == nil && st.Status != handoffpb.HandoffStatus_ACCEPTED && st.Status != handoffpb.HandoffStatus_PENDING
		})
		return st
	}
	told := func(request, event string) (handoffEvent, bool) {
		var ev handoffEvent
		var ok bool
		_ = waitFor(time.Minute, 100*time.Millisecond, func() bool { ev, ok = events.last(request, event); return ok })
		return ev, ok
	}
	completed, expired, stranded := 0, 0, 0
	if st := state(closer.request); st.Status == handoffpb.HandoffStatus_COMPLETED && st.AcceptedBy == closer.agent {
		completed++
	} else {
		stranded++
		f.problem("handoff %s is %s after its agent came back, not COMPLETED by %s", closer.request, st.Status, closer.agent)
	}
	if _, ok := told(closer.request, "handoff_completed"); !ok {
		f.problem("the originator was not told %s completed: %v", closer.request, events.seen(closer.request))
	}
	if err := waitFor(30*time.Second, 100*time.Millisecond, func() bool {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		defer scancel()
		_, err := origin.Send(sctx, sdk.Message{To: closer.agent, CorrelationID: closer.corr, Payload: []byte(`{"more":"work"}`)})
		c, ok := rejectedCode(err)
		return ok && c == commonpb.ErrorCode_PERMISSION_DENIED
	}); err != nil {
		f.problem("the originator is not fenced from %s after its handoff completed", closer.corr)
	}

	// The lost agent never comes back: its handoff expires at the budget's deadline.
	lost := tickets[1]
	if st := state(lost.request); st.Status == handoffpb.HandoffStatus_EXPIRED && strings.Contains(st.EndReason, "completion deadline") {
		expired++
	} else {
		stranded++
		f.problem("handoff %s is %s (%q), not EXPIRED at its completion deadline", lost.request, st.Status, st.EndReason)
	}
	if ev, ok := told(lost.request, "handoff_expired"); !ok || !strings.Contains(ev.Reason, "wall_time_remaining_ms 20000") {
		f.problem("the originator was not told why %s expired: %+v %v", lost.request, ev, events.seen(lost.request))
	}
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	if _, err := origin.Send(sctx, sdk.Message{To: lost.agent, CorrelationID: lost.corr, Payload: []byte(`{"carry":"on"}`)}); err != nil {
		f.problem("the originator may not carry on with %s after the expiry: %v", lost.corr, err)
	}
	scancel()
	cancel()
	stopReader()

	if !slices.Contains(events.seen(closer.request), "handoff_accepted") || !slices.Contains(events.seen(lost.request), "handoff_accepted") {
		f.problem("the originator was not told of both acceptances: %v, %v", events.seen(closer.request), events.seen(lost.request))
	}
	f.add("handoffs_completed=%d handoffs_expired=%d stranded_handoffs=%d", completed, expired, stranded)
	f.report(t)
}
