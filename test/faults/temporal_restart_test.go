package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/sdk"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// operatorToken is the HITL operator's token in the scenarios that decide invocations.
const operatorToken = "faults-operator-token"

// temporalOutage is how long the Temporal scenario keeps the dev server down.
const temporalOutage = 20 * time.Second

// TestTemporalRestartedWhileTasksFinishAndHITLWaits: three agents run one task each on
// `sw4rm dev` (PostgreSQL) while three callers wait in HitlService.Decide and A sends B
// messages. The Temporal dev server is killed with SIGKILL for 20 s; while it is down the
// three tasks finish and the SDK sends their ACKs FULFILLED, and another agent registers.
// Then Temporal is started again on the same database file, the operator approves the
// invocations, and three more tasks are submitted. Every task completes (issue 13 defect 1:
// the ACKs that arrived during the outage must still reach the scheduler), every caller gets
// the operator's decision (defect 2), the agent that registered during the outage is not
// left half registered (defect 6), and the message plane, which does not need Temporal,
// loses nothing.
func TestTemporalRestartedWhileTasksFinishAndHITLWaits(t *testing.T) {
	dir := t.TempDir()
	pg := newCluster(t)
	ts := startTemporal(t, dir)
	dev := startSW4RM(t, dir, "dev", "dev", sw4rmConfig{temporal: ts.addr, database: pg.URL(), extra: []string{
		"SW4RM_HITL_OPERATORS=ops=" + operatorToken,
		"SW4RM_ACK_TIMEOUT=60s",
	}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acks := &ackWatch{}
	var agents []*taskAgent
	var stops []func()
	for range 3 {
		a := dialAgent(t, dev.addr, agentID("runner"), acks.interceptor())
		register(t, a, "runner")
		ta := newTaskAgent(a, acks, 50*time.Millisecond)
		ta.hold()
		agents = append(agents, ta)
		stops = append(stops, ta.serve(ctx))
	}
	conn, err := grpc.NewClient(dev.addr, connOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	op := newOperator(conn, ts.client)
	for i, ta := range agents {
		op.submit(ctx, ta.agent.ID(), taskID("before", i))
	}
	if err := waitFor(time.Minute, 20*time.Millisecond, func() bool {
		for i, ta := range agents {
			if !ta.started(taskID("before", i)) {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal("the first tasks never started running")
	}

	var callers []*hitlCaller
	for range 3 {
		callers = append(callers, startHITLCaller(t, ctx, conn))
	}

	a := dialAgent(t, dev.addr, agentID("producer"))
	b := dialAgent(t, dev.addr, agentID("consumer"))
	register(t, a, "producer")
	register(t, b, "consumer")
	fl := startFlow(ctx, a, b, 300, 2, 0)

	late := dialAgent(t, dev.addr, agentID("late"))

	ts.kill()
	outage := time.Now()
	for _, ta := range agents {
		ta.release()
	}
	// An agent registers while Temporal is down: whatever it is answered, it must not end up
	// half registered.
	lateAnswer := make(chan error, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		lateAnswer <- late.Register(rctx, &registrypb.AgentDescriptor{Name: "late", Description: "registers during the outage"})
	}()
	// The SDK sends each task's ACK FULFILLED when its handler returns; wait until the server
	// has answered all three (whatever it answered) before Temporal comes back.
	if err := waitFor(time.Minute, 50*time.Millisecond, func() bool { n, _ := acks.count(); return n >= len(agents) }); err != nil {
		n, _ := acks.count()
		t.Fatalf("only %d of %d ACKs FULFILLED were answered while Temporal was down", n, len(agents))
	}
	_, ackErrs := acks.count()
	lateErr := <-lateAnswer
	// The outage's length is the fault being injected: longer than the Temporal client's 10 s
	// RPC timeout (so an ACK's or a registration's signal made while it lasts fails for good)
	// and than one attempt of the HITL callers (so they keep their decision only by retrying
	// with their idempotency key).
	time.Sleep(time.Until(outage.Add(temporalOutage)))
	ts.restart()
	down := time.Since(outage)

	decided := 0
	for _, h := range callers {
		if h.approve(t, ctx) {
			decided++
		}
	}
	for i, ta := range agents {
		op.submit(ctx, ta.agent.ID(), taskID("after", i))
	}
	notDone := op.waitCompleted(ctx, 30*time.Second)
	half := halfRegistered(ctx, ts, a, late.ID())
	hitlLost := 0
	answerBy := time.Now().Add(time.Minute)
	for _, h := range callers {
		hitlLost += h.lost(t, answerBy)
	}
	fl.settle(t, ctx, time.Minute)
	cancel()
	fl.stop()
	for _, stop := range stops {
		stop()
	}

	f := figures{scenario: "temporal-restart", hitlLost: hitlLost}
	taskFigures(&f, op, notDone, agents...)
	fl.figures(&f)
	fl.audit(t, &f, pg)
	retries := 0
	for _, h := range callers {
		retries += int(h.retries.Load())
	}
	f.add("temporal_down=%s acks_refused=%d hitl_callers=%d hitl_decided=%d hitl_retries=%d register_during_outage=%q",
		down.Round(100*time.Millisecond), len(ackErrs), len(callers), decided, retries, errText(lateErr))
	if half != "" {
		f.problem("agent %s registered during the outage is half registered: %s", late.ID(), half)
	}
	for i, err := range ackErrs {
		if i == 0 {
			t.Logf("an ACK FULFILLED sent while Temporal was down was answered: %v", err)
		}
	}
	f.report(t)
}

// halfRegistered checks that an agent is either routable with a running lifecycle workflow,
// or not routable at all (issue 13 defect 6); it returns what is wrong, or "". A probe message
// from the producer tells whether routing knows the agent; the lifecycle is given 30 s to
// appear.
func halfRegistered(ctx context.Context, ts *temporalServer, producer *sdk.Agent, id string) string {
	var routable bool
	var probeErr error
	_ = waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, probeErr = producer.Send(pctx, sdk.Message{To: id, Payload: []byte(`{"probe":true}`), IdempotencyToken: "probe-" + id})
		code, rejected := rejectedCode(probeErr)
		routable = probeErr == nil || code == commonpb.ErrorCode_ALREADY_IN_PROGRESS
		return routable || (rejected && code == commonpb.ErrorCode_NO_ROUTE)
	})
	if !routable {
		if code, _ := rejectedCode(probeErr); code == commonpb.ErrorCode_NO_ROUTE {
			return ""
		}
		return fmt.Sprintf("routing gives no answer: %v", probeErr)
	}
	var lifecycle string
	if err := waitFor(30*time.Second, 250*time.Millisecond, func() bool {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		d, err := ts.client.DescribeWorkflowExecution(dctx, workflows.AgentWorkflowID(id), "")
		if err != nil {
			lifecycle = err.Error()
			return false
		}
		lifecycle = d.GetWorkflowExecutionInfo().GetStatus().String()
		return d.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING
	}); err != nil {
		return "messages to it are admitted but its lifecycle workflow is " + lifecycle
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// hitlCaller is a process blocked in the canonical HitlService.Decide, and the operator who
// decides its invocation through HitlAdminService.
type hitlCaller struct {
	admin  hitladminpb.HitlAdminServiceClient
	id     string
	answer chan hitlAnswer
	// retries counts the caller's retries with its idempotency key.
	retries atomic.Int32
}

type hitlAnswer struct {
	decision *hitlpb.HitlDecision
	err      error
}

// startHITLCaller calls Decide in the background and finds the invocation it raised in the
// operators' pending list.
func startHITLCaller(t testing.TB, ctx context.Context, conn *grpc.ClientConn) *hitlCaller {
	t.Helper()
	h := &hitlCaller{admin: hitladminpb.NewHitlAdminServiceClient(conn), answer: make(chan hitlAnswer, 1)}
	marker := "fault-suite-" + agentID("hitl")
	body, _ := json.Marshal(hitl.Context{Facts: []string{marker}})
	go func() {
		// A careful caller (docs/hitl.md): each attempt waits at most 15 s, and an attempt
		// answered Unavailable or cut off by its deadline is retried with the same
		// idempotency key, which attaches to the same invocation. The outage outlasts an
		// attempt, so the decision reaches the caller only through that retry.
		kctx := metadata.AppendToOutgoingContext(ctx, "sw4rm-idempotency-key", marker)
		var (
			d   *hitlpb.HitlDecision
			err error
		)
		for {
			actx, cancel := context.WithTimeout(kctx, 15*time.Second)
			d, err = hitlpb.NewHitlServiceClient(conn).Decide(actx, &hitlpb.HitlInvocation{ReasonType: commonpb.HitlReasonType_SECURITY_APPROVAL,
				Context: body, ProposedActions: []string{"approve", "deny"}})
			cancel()
			if c := status.Code(err); (c != codes.Unavailable && c != codes.DeadlineExceeded) || ctx.Err() != nil {
				break
			}
			h.retries.Add(1)
			time.Sleep(500 * time.Millisecond)
		}
		h.answer <- hitlAnswer{d, err}
	}()
	if err := waitFor(time.Minute, 100*time.Millisecond, func() bool {
		res, err := h.admin.ListInvocations(h.auth(ctx), &hitladminpb.ListInvocationsRequest{})
		if err != nil {
			return false
		}
		for _, inv := range res.GetInvocations() {
			if strings.Contains(inv.GetInvocationJson(), marker) {
				h.id = inv.GetInvocationId()
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("the HITL invocation never showed up among the pending ones")
	}
	return h
}

func (h *hitlCaller) auth(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+operatorToken)
}

// approve has the operator approve the invocation, retrying while the system recovers; it
// reports whether the decision was applied.
func (h *hitlCaller) approve(t testing.TB, ctx context.Context) bool {
	var last error
	err := waitFor(time.Minute, 250*time.Millisecond, func() bool {
		dctx, cancel := context.WithTimeout(h.auth(ctx), 20*time.Second)
		defer cancel()
		_, last = h.admin.Decide(dctx, &hitladminpb.DecideRequest{InvocationId: h.id, Decision: "approve", Rationale: "fault suite"})
		return last == nil
	})
	if err != nil {
		t.Errorf("the operator could not decide invocation %s: %v", h.id, last)
		return false
	}
	return true
}

// lost waits until by for the caller's answer and reports 1 when it is not the operator's
// approval.
func (h *hitlCaller) lost(t testing.TB, by time.Time) int {
	select {
	case a := <-h.answer:
		if a.err != nil {
			t.Logf("the HITL caller lost its decision: %v", a.err)
			return 1
		}
		if a.decision.GetAction() != string(hitl.Approve) {
			t.Logf("the HITL caller got %q, not the operator's approval", a.decision.GetAction())
			return 1
		}
		return 0
	case <-time.After(time.Until(by)):
		t.Logf("the HITL caller got no answer within a minute of the decision")
		return 1
	}
}
