package frontend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/bridge"
	"github.com/sw4rm/sw4rm-temporal/outbox"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/handoffpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/scheduling"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// handoffService serves sw4rm.handoff.HandoffService (§17.6): each handoff is the durable
// workflow handoff/<request_id>; the store holds its projection and the context snapshot,
// which never enters workflow history.
type handoffService struct {
	handoffpb.UnimplementedHandoffServiceServer
	s *Server
}

// firstMD returns the first value of an incoming metadata key, or "".
func firstMD(ctx context.Context, key string) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(key); len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// RequestHandoff validates the request, stores it with its context snapshot and starts its
// workflow, which routes and offers it (§17.6). A request_id already used answers OK with the
// existing handoff's state in the sw4rm-handoff-state header, and starts nothing.
func (h *handoffService) RequestHandoff(ctx context.Context, req *handoffpb.HandoffRequest) (*commonpb.Empty, error) {
	ct := firstMD(ctx, wire.ContextContentTypeKey)
	if ct == "" {
		ct = protocol.DefaultHandoffContentType
	}
	corr := firstMD(ctx, wire.CorrelationIDKey)
	if corr == "" {
		corr = req.GetRequestId()
	}
	if perr := protocol.ValidateHandoffCall(req, ct, corr, h.s.router.Config().MaxPayloadBytes); perr != nil {
		return nil, perr
	}
	// A reuse is answered before any other check: the handoff exists, whatever changed since.
	if prev, err := h.s.store.Handoffs().GetHandoff(ctx, req.GetRequestId()); err == nil {
		return h.reused(ctx, prev, req.GetFromAgent())
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, failed("handoff lookup", err)
	}
	if err := h.mayHandOff(ctx, corr, ct, req); err != nil {
		return nil, err
	}
	return h.create(ctx, req, corr, ct)
}

// mayHandOff checks the parties of a new handoff req of correlation corr: a registered
// originator that still owns the context, and a named target that is registered, declares
// every capability in capabilities_required, accepts the context's content type and did not
// hand this context away itself (§17.6).
func (h *handoffService) mayHandOff(ctx context.Context, corr, ct string, req *handoffpb.HandoffRequest) error {
	from, to := req.GetFromAgent(), req.GetToAgent()
	if err := h.s.registered(ctx, from, "from_agent %q is not a registered agent; register it first"); err != nil {
		return err
	}
	// The originator may not hand off a context it already handed away (§17.6).
	if f, fenced, err := h.s.router.Fenced(ctx, corr, from); err != nil {
		return failed("fence lookup", err)
	} else if fenced {
		return router.FenceError(f)
	}
	if to == "" {
		return nil
	}
	rec, err := h.s.router.Agent(ctx, to)
	if errors.Is(err, store.ErrNotFound) {
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "to_agent %q is not a registered agent", to)
	}
	if err != nil {
		return failed("registry lookup", err)
	}
	// §17.6: capabilities_required are those "the receiving agent MUST possess", so a named
	// target without them is never offered the work. The request itself is well formed —
	// it is the target's registration that falls short, and the same request succeeds once
	// the agent registers the capabilities — so this is validation_error with
	// FailedPrecondition (errors.go: a refusal the state of a resource caused), not
	// InvalidArgument.
	if missing := protocol.MissingCapabilities(rec.Descriptor.GetCapabilities(), req.GetCapabilitiesRequired()); len(missing) > 0 {
		return precondition(commonpb.ErrorCode_VALIDATION_ERROR, "to_agent %q lacks capabilities_required %v: it declares %v (§17.6: capabilities the receiving agent MUST possess); name a capable agent, or leave to_agent empty to route on the capabilities",
			to, missing, rec.Descriptor.GetCapabilities())
	}
	if !protocol.AcceptsContentType(rec.Descriptor.GetModalitiesSupported(), ct) {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "context content type %q is not among the modalities agent %q declared %v (004 item 8)",
			ct, to, rec.Descriptor.GetModalitiesSupported())
	}
	// Ping-pong: B may not hand back to A a context A handed to it on this correlation.
	if f, fenced, err := h.s.router.Fenced(ctx, corr, to); err != nil {
		return failed("fence lookup", err)
	} else if fenced {
		return protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "fenced: %s handed correlation %s to %s by handoff %s and may not take it back (§17.6: no ping-pong)",
			to, corr, f.NewOwner, f.RequestID)
	}
	return nil
}

// create stores a new handoff with the outbox entry that starts its workflow, and has the
// relay deliver that entry now.
func (h *handoffService) create(ctx context.Context, req *handoffpb.HandoffRequest, corr, ct string) (*commonpb.Empty, error) {
	id, from, to := req.GetRequestId(), req.GetFromAgent(), req.GetToAgent()
	body, err := proto.Marshal(req)
	if err != nil {
		return nil, internalf("%v", err)
	}
	in := workflows.HandoffInputFrom(req, corr, ct, time.Now().UTC())
	in.CompletionTimeout = h.s.cfg.HandoffCompletionTimeout
	start, err := bridge.NewOutboxEntry(workflows.OutboxHandoffStart, workflows.HandoffWorkflowID(id), workflows.HandoffStartPayload{Input: in})
	if err != nil {
		return nil, internalf("%v", err)
	}
	start = outbox.Stamp(ctx, start) // a late delivery continues this call's trace
	// The record (with the snapshot) and the workflow's start are one store write, so no
	// stored handoff is ever left without its workflow, whatever fails next.
	rec := store.HandoffRecord{RequestID: id, Correlation: corr, From: from, Target: to, Status: handoffpb.HandoffStatus_PENDING,
		Request: body, ContextContentType: ct}
	if prev, err := h.s.store.Handoffs().CreateHandoff(ctx, rec, start); errors.Is(err, store.ErrDuplicateHandoff) {
		return h.reused(ctx, prev, from)
	} else if err != nil {
		return nil, failed("handoff write", err)
	}
	details := map[string]any{"from_agent": from, "to_agent": to, "capabilities_required": req.GetCapabilitiesRequired(),
		"context_content_type": ct, "context_bytes": len(req.GetContextSnapshot()), "workflow": "started"}
	if err := h.s.relay.Deliver(ctx, start); err != nil {
		// Stored all the same: the relay starts the workflow once Temporal takes it.
		h.s.log.Warn("handoff stored; its workflow starts when Temporal is reachable", "request_id", id, "error", err)
		details["workflow"], details["workflow_error"] = "pending", err.Error()
	}
	h.s.sink.Record(ctx, audit.Event{CorrelationID: corr, Actor: from, Type: "handoff.requested", AgentID: to, Details: details})
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.HandoffStateHeader, handoffpb.HandoffStatus_PENDING.String()))
	return &commonpb.Empty{}, nil
}

// reused answers a RequestHandoff whose request_id exists: the existing handoff's state, to
// its originator only.
func (h *handoffService) reused(ctx context.Context, prev store.HandoffRecord, from string) (*commonpb.Empty, error) {
	if prev.From != from {
		return nil, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "request_id %q names a handoff of another agent; choose a new request_id", prev.RequestID)
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.HandoffStateHeader, prev.Status.String()))
	return &commonpb.Empty{}, nil
}

// answering returns the agent a HandoffResponse answers as: the proven caller when there is
// one (the authorization rule already held it to accepting_agent), else accepting_agent.
func answering(ctx context.Context, req *handoffpb.HandoffResponse) (string, error) {
	if perr := protocol.ValidateHandoffResponse(req); perr != nil {
		return "", perr
	}
	if p := auth.FromContext(ctx); p.Agent != "" {
		return p.Agent, nil
	}
	return req.GetAcceptingAgent(), nil
}

// AcceptHandoff takes the offered handoff (§17.6). The workflow's validator refuses it
// unless the handoff is PENDING and offered to the caller; a refusal leaves no trace in the
// workflow's history and answers FailedPrecondition. An AcceptHandoff sent again by the agent
// that accepted — a retry whose answer was lost, or the agent recovering its work after a
// restart — answers OK as the first did: the handoff is that agent's. The answer's headers
// are the state and, when the handoff has one, its completion deadline
// (wire.HandoffCompleteByHeader).
func (h *handoffService) AcceptHandoff(ctx context.Context, req *handoffpb.HandoffResponse) (*commonpb.Empty, error) {
	agent, err := answering(ctx, req)
	if err != nil {
		return nil, err
	}
	st, err := h.update(ctx, req.GetRequestId(), agent, "offered to", workflows.HandoffAcceptUpdate, workflows.HandoffAnswer{Agent: agent})
	if err != nil {
		prev, ok := h.acceptedBy(ctx, req.GetRequestId(), agent)
		if !ok {
			return nil, err
		}
		st = prev
	}
	md := metadata.Pairs(wire.HandoffStateHeader, st.Status.String())
	if !st.CompleteBy.IsZero() {
		md.Set(wire.HandoffCompleteByHeader, st.CompleteBy.UTC().Format(time.RFC3339Nano))
	}
	_ = grpc.SetHeader(ctx, md)
	return &commonpb.Empty{}, nil
}

// acceptedBy returns the state of handoff id if agent accepted it and it is still ACCEPTED,
// as the workflow itself answers (its state query): the store's projection of a run may
// still lag its acceptance when the accepting agent crashed in the middle of AcceptHandoff.
// A handoff the store shows neither offered to agent nor accepted by it is not asked about.
func (h *handoffService) acceptedBy(ctx context.Context, id, agent string) (workflows.HandoffState, bool) {
	rec, err := h.s.store.Handoffs().GetHandoff(ctx, id)
	if err != nil || rec.Target != agent && rec.AcceptedBy != agent {
		return workflows.HandoffState{}, false
	}
	v, err := h.s.temporal.QueryWorkflow(ctx, workflows.HandoffWorkflowID(id), "", workflows.HandoffStateQuery)
	if err != nil {
		return workflows.HandoffState{}, false
	}
	var st workflows.HandoffState
	if err := v.Get(&st); err != nil {
		return workflows.HandoffState{}, false
	}
	return st, st.Status == handoffpb.HandoffStatus_ACCEPTED && st.AcceptedBy == agent
}

// RejectHandoff declines the offered handoff (§17.6): rejection_code OVERLOADED (with
// retry_after_ms) has the workflow offer it again after a backoff, REDIRECT with
// redirect_to_agent_id offers it to that agent when spillover routing allows and the agent
// qualifies (a blank one or a loop ends the handoff), anything else moves on to the next
// capable agent or ends the handoff REJECTED (docs/handoff.md).
func (h *handoffService) RejectHandoff(ctx context.Context, req *handoffpb.HandoffResponse) (*commonpb.Empty, error) {
	agent, err := answering(ctx, req)
	if err != nil {
		return nil, err
	}
	// A blank redirect_to_agent_id reaches the workflow as "", which ends the handoff
	// (protocol.ValidateRedirect).
	ans := workflows.HandoffAnswer{Agent: agent, Reason: req.GetRejectionReason(), Code: req.GetRejectionCode(),
		RetryAfterMs: req.GetRetryAfterMs(), RedirectTo: strings.TrimSpace(req.GetRedirectToAgentId())}
	st, err := h.update(ctx, req.GetRequestId(), agent, "offered to", workflows.HandoffRejectUpdate, ans)
	if err != nil {
		return nil, err
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(wire.HandoffStateHeader, st.Status.String()))
	return &commonpb.Empty{}, nil
}

// update sends a validated update to handoff/<id> and waits for its answer. A refusal — by
// the validator, or because the workflow has ended — is FailedPrecondition "handoff X is not
// <relation> Y (state S)".
//
// An answer (accept or reject) from the agent the store lists the handoff as offered to waits
// up to offerCatchUp for the workflow to make that offer: GetPendingHandoffs reads the store,
// where RequestHandoff records a named target at once, while the workflow — started through
// the outbox — makes the offer a moment later. What a client can read, it can act on.
func (h *handoffService) update(ctx context.Context, id, agent, relation, name string, arg any) (workflows.HandoffState, error) {
	answer := name == workflows.HandoffAcceptUpdate || name == workflows.HandoffRejectUpdate
	catchUp := time.Now().Add(offerCatchUp)
	st, err := update[workflows.HandoffState](ctx, h.s.temporal, client.UpdateWorkflowOptions{
		WorkflowID: workflows.HandoffWorkflowID(id), UpdateName: name, Args: []any{arg},
	})
	for answer && (classify(err) == temporalRefused || classify(err) == temporalNotFound) && time.Now().Before(catchUp) && h.listedFor(ctx, id, agent) {
		if !sleepCtx(ctx, offerCatchUpPoll) {
			break
		}
		st, err = update[workflows.HandoffState](ctx, h.s.temporal, client.UpdateWorkflowOptions{
			WorkflowID: workflows.HandoffWorkflowID(id), UpdateName: name, Args: []any{arg},
		})
	}
	switch classify(err) {
	case temporalRefused, temporalClosing:
	case temporalNotFound:
		// No running workflow: an unknown handoff, or one stored whose workflow has ended
		// (or not started yet) — the store tells which.
		if _, gerr := h.s.store.Handoffs().GetHandoff(ctx, id); errors.Is(gerr, store.ErrNotFound) {
			return st, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no handoff %q", id)
		}
	default:
		if err == nil {
			return st, nil
		}
		return st, temporalUnavailable("reach the handoff's workflow", err)
	}
	state := "unknown"
	if rec, gerr := h.s.store.Handoffs().GetHandoff(ctx, id); gerr == nil {
		state = rec.Status.String()
	}
	return st, precondition(commonpb.ErrorCode_VALIDATION_ERROR, "handoff %s is not %s %s (state %s)", id, relation, agent, state)
}

// offerCatchUp bounds how long an answer waits for the offer GetPendingHandoffs already
// lists (see update); offerCatchUpPoll is how often it asks again meanwhile.
const (
	offerCatchUp     = 5 * time.Second
	offerCatchUpPoll = 50 * time.Millisecond
)

// listedFor reports whether GetPendingHandoffs lists handoff id for agent: PENDING, with agent
// as its target.
func (h *handoffService) listedFor(ctx context.Context, id, agent string) bool {
	rec, err := h.s.store.Handoffs().GetHandoff(ctx, id)
	return err == nil && rec.Status == handoffpb.HandoffStatus_PENDING && rec.Target == agent
}

// GetPendingHandoffs lists the handoffs offered to an agent and waiting for its answer, with
// their context snapshots (§17.6: agents call it after recovering from a failure). With
// request metadata sw4rm-handoff-include-accepted: true it lists after them the handoffs the
// agent accepted and has not completed, so that an agent that crashed holding one gets its
// snapshot again. The snapshots' content types, correlations and the handoffs' states are
// the response headers sw4rm-context-content-type, sw4rm-correlation-id and
// sw4rm-handoff-state, one value per request, in order.
func (h *handoffService) GetPendingHandoffs(ctx context.Context, req *handoffpb.GetPendingHandoffsRequest) (*handoffpb.GetPendingHandoffsResponse, error) {
	if perr := protocol.ValidateAgentID(req.GetAgentId()); perr != nil {
		return nil, perr
	}
	var values []string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		values = md.Get(wire.HandoffIncludeAcceptedKey)
	}
	withAccepted, perr := scheduling.ParseFlag(wire.HandoffIncludeAcceptedKey, values)
	if perr != nil {
		return nil, perr
	}
	recs, err := h.s.store.Handoffs().ListOfferedTo(ctx, req.GetAgentId())
	if err != nil {
		return nil, failed("list pending handoffs", err)
	}
	// Not by default: pending_requests are offers waiting for an answer, and an agent that
	// polls them (§17.6 "periodically") would take work it is already doing for new work.
	if withAccepted {
		accepted, err := h.s.store.Handoffs().ListAcceptedBy(ctx, req.GetAgentId())
		if err != nil {
			return nil, failed("list accepted handoffs", err)
		}
		recs = append(recs, accepted...)
	}
	resp := &handoffpb.GetPendingHandoffsResponse{}
	md := metadata.MD{}
	for _, rec := range recs {
		var r handoffpb.HandoffRequest
		if err := proto.Unmarshal(rec.Request, &r); err != nil {
			h.s.log.Error("stored handoff request does not decode", "request_id", rec.RequestID, "error", err)
			continue
		}
		resp.PendingRequests = append(resp.PendingRequests, &r)
		md.Append(wire.ContextContentTypeKey, rec.ContextContentType)
		md.Append(wire.CorrelationIDKey, rec.Correlation)
		md.Append(wire.HandoffStateHeader, rec.Status.String())
	}
	if len(resp.PendingRequests) > 0 {
		_ = grpc.SetHeader(ctx, md)
	}
	return resp, nil
}

// CompleteHandoff records that the accepting agent took the context over (§17.6): the
// handoff becomes COMPLETED and its originator is fenced on the correlation. Only the
// accepting agent (the proven caller; anyone when authentication is off) or an operator may
// complete it.
func (h *handoffService) CompleteHandoff(ctx context.Context, req *handoffpb.CompleteHandoffRequest) (*handoffpb.CompleteHandoffResponse, error) {
	if perr := protocol.ValidateCompleteHandoff(req); perr != nil {
		return nil, perr
	}
	id := req.GetRequestId()
	p := auth.FromContext(ctx)
	who := p.Agent
	if who == "" {
		who = "the caller"
	}
	st, err := h.update(ctx, id, who, "accepted by", workflows.HandoffCompleteUpdate,
		workflows.HandoffCompletion{Agent: p.Agent, Status: handoffpb.HandoffStatus_COMPLETED})
	if err != nil {
		return nil, err
	}
	return &handoffpb.CompleteHandoffResponse{Success: true,
		Message: fmt.Sprintf("handoff %s is %s; correlation %s belongs to %s", id, st.Status, st.Correlation, st.AcceptedBy)}, nil
}

// CancelDelegation cancels every open (PENDING or ACCEPTED) handoff of a correlation, with
// its grace period; each workflow tells the agents involved and ends EXPIRED. Only the
// originator of those handoffs, or an operator, may cancel them.
func (h *handoffService) CancelDelegation(ctx context.Context, req *handoffpb.CancelDelegation) (*handoffpb.CancelDelegationResponse, error) {
	corr := req.GetCorrelationId()
	if corr == "" {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "correlation_id is required")
	}
	p := auth.FromContext(ctx)
	open, err := h.openHandoffs(ctx, corr, p)
	if err != nil {
		return nil, err
	}
	cancel := workflows.HandoffCancel{Reason: req.GetReason(), GracePeriod: time.Duration(req.GetGracePeriodMs()) * time.Millisecond, By: p.String()}
	if p.Anonymous() {
		cancel.By = ""
	}
	n, err := h.cancel(ctx, open, cancel)
	if err != nil {
		return nil, err
	}
	h.s.sink.Record(ctx, audit.Event{CorrelationID: corr, Actor: cancel.By, Type: "handoff.cancel_requested",
		Details: map[string]any{"reason": req.GetReason(), "grace_period_ms": req.GetGracePeriodMs(), "cancelled": n}})
	msg := fmt.Sprintf("cancelled %d open handoff(s) of correlation %s", n, corr)
	if n == 0 {
		msg = "no open handoff on correlation " + corr
	}
	return &handoffpb.CancelDelegationResponse{Acknowledged: true, Message: msg}, nil
}

// openHandoffs lists the open (PENDING or ACCEPTED) handoffs of correlation corr, all of
// which p may cancel: their originator, an operator, or anyone when p is anonymous.
func (h *handoffService) openHandoffs(ctx context.Context, corr string, p auth.Principal) ([]store.HandoffRecord, error) {
	recs, err := h.s.store.Handoffs().ListByCorrelation(ctx, corr)
	if err != nil {
		return nil, failed("list the correlation's handoffs", err)
	}
	if len(recs) == 0 {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no handoff on correlation %q", corr)
	}
	var open []store.HandoffRecord
	for _, rec := range recs {
		if rec.Status != handoffpb.HandoffStatus_PENDING && rec.Status != handoffpb.HandoffStatus_ACCEPTED {
			continue
		}
		if p.Operator == "" && p.Agent != "" && rec.From != p.Agent {
			return nil, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "handoff %s on correlation %s was requested by %q, not %q: only its originator or an operator may cancel it",
				rec.RequestID, corr, rec.From, p.Agent)
		}
		open = append(open, rec)
	}
	return open, nil
}

// cancel signals each handoff's workflow to cancel, and counts those still running.
func (h *handoffService) cancel(ctx context.Context, open []store.HandoffRecord, cancel workflows.HandoffCancel) (int, error) {
	n := 0
	for _, rec := range open {
		err := h.s.temporal.SignalWorkflow(ctx, workflows.HandoffWorkflowID(rec.RequestID), "", workflows.HandoffCancelSignal, cancel)
		switch {
		case classify(err) == temporalNotFound:
			continue // ended meanwhile: nothing left to cancel
		case err != nil:
			return n, temporalUnavailable("signal handoff "+rec.RequestID, err)
		}
		n++
	}
	return n, nil
}
