package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// hitlAdminService serves the extension sw4rmext.hitl.v1.HitlAdminService: listing,
// deciding and auditing invocations for authenticated operators.
type hitlAdminService struct {
	hitladminpb.UnimplementedHitlAdminServiceServer
	s *Server
}

// authenticate finds the operator making the call (§15.1, §23): the one the auth interceptor
// already proved, else the one whose bearer token the call carries. The token is checked here
// and goes no further: what leaves the frontend names the operator, never the secret.
func (h *hitlAdminService) authenticate(ctx context.Context) (hitl.Operator, error) {
	if name := auth.FromContext(ctx).Operator; name != "" {
		op, ok := h.s.cfg.HITLPolicy.Operator(name)
		if !ok {
			return hitl.Operator{}, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED, "operator %q is not a HITL operator (SW4RM_HITL_OPERATORS)", name)
		}
		return op, nil
	}
	op, _, err := h.s.operatorFromToken(ctx)
	return op, err
}

// operatorFromToken finds the operator whose token the call carries in the metadata
// "authorization: Bearer <token>" (§15.1, §23), and returns it with the token. Every
// operator service authenticates tokens through it.
func (s *Server) operatorFromToken(ctx context.Context) (hitl.Operator, string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	token := bearerToken(md)
	if token == "" {
		return hitl.Operator{}, "", status.Error(codes.Unauthenticated, "permission_denied: an operator token is required (metadata authorization: Bearer <token>; CLI: --token or SW4RM_OPERATOR_TOKEN)")
	}
	op, ok := s.cfg.HITLPolicy.OperatorForToken(token)
	if !ok {
		return hitl.Operator{}, "", status.Error(codes.Unauthenticated, "permission_denied: the operator token is not valid")
	}
	return op, token, nil
}

func summary(r store.HITLRecord) *hitladminpb.InvocationSummary {
	s := &hitladminpb.InvocationSummary{
		InvocationId: r.InvocationID, ReasonType: r.ReasonType, Subject: r.Subject, Priority: r.Priority,
		CreatedAt: timestamppb.New(r.CreatedAt), Deadline: timestamppb.New(r.Deadline), Status: r.Status,
		InvocationJson: string(r.Invocation), OutcomeJson: string(r.Outcome), CorrelationId: r.CorrelationID,
	}
	return s
}

// ListInvocations lists pending (or all) invocations.
func (h *hitlAdminService) ListInvocations(ctx context.Context, req *hitladminpb.ListInvocationsRequest) (*hitladminpb.ListInvocationsResponse, error) {
	if _, err := h.authenticate(ctx); err != nil {
		return nil, err
	}
	f := store.HITLFilter{ReasonType: req.GetReasonType(), Limit: int(req.GetLimit())}
	if !req.GetIncludeDecided() {
		f.Status = store.HITLPending
	}
	recs, err := h.s.store.HITL().ListInvocations(ctx, f)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	out := &hitladminpb.ListInvocationsResponse{}
	for _, r := range recs {
		out.Invocations = append(out.Invocations, summary(r))
	}
	return out, nil
}

// GetInvocation returns one invocation.
func (h *hitlAdminService) GetInvocation(ctx context.Context, req *hitladminpb.GetInvocationRequest) (*hitladminpb.InvocationSummary, error) {
	if _, err := h.authenticate(ctx); err != nil {
		return nil, err
	}
	r, err := h.s.store.HITL().GetInvocation(ctx, req.GetInvocationId())
	if errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "unknown invocation %q", req.GetInvocationId())
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	return summary(r), nil
}

// Decide checks the operator, the decision and the invocation's state, signals the decision
// to hitl/<invocation_id> and returns the outcome the workflow applied. The signal names the
// authenticated operator and carries an attestation by the deployment's decision key
// (hitl.Attest), never the operator's token: a signal's input stays in the workflow's
// history. A repeat of the decision that was applied is answered with it (idempotent); any
// other decision on a decided invocation is refused and changes nothing.
func (h *hitlAdminService) Decide(ctx context.Context, req *hitladminpb.DecideRequest) (*hitladminpb.DecideResponse, error) {
	op, err := h.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	d, perr := hitl.DecisionOf(req, op.Name, viaOf(ctx))
	if perr != nil {
		return nil, perr
	}
	rec, err := h.decidable(ctx, d)
	if err != nil {
		return nil, err
	}
	if rec.Status == store.HITLDecided {
		return alreadyDecided(rec, d)
	}
	return h.deliver(ctx, d)
}

// decidable reads the invocation d decides and checks that d's operator may decide it.
func (h *hitlAdminService) decidable(ctx context.Context, d hitl.Decision) (store.HITLRecord, error) {
	rec, err := h.s.store.HITL().GetInvocation(ctx, d.InvocationID)
	if errors.Is(err, store.ErrNotFound) {
		return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "unknown invocation %q (sw4rm hitl list shows the pending ones)", d.InvocationID)
	}
	if err != nil {
		return rec, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	if err := h.s.cfg.HITLPolicy.Permit(d.Operator, rec.ReasonType); err != nil {
		return rec, status.Error(codes.PermissionDenied, err.Error())
	}
	return rec, nil
}

// deliver signals an attested decision to the invocation's workflow and returns the outcome
// it recorded.
func (h *hitlAdminService) deliver(ctx context.Context, d hitl.Decision) (*hitladminpb.DecideResponse, error) {
	if h.s.cfg.HITLDecisionKey == nil {
		return nil, status.Error(codes.FailedPrecondition, "internal_error: this server has no HITL decision key (SW4RM_HITL_DECISION_KEY_FILE), so it cannot vouch for decisions")
	}
	// A fresh attestation per attempt: repeating a decision after an error signs it again.
	signed, err := hitl.Attest(d, h.s.cfg.HITLDecisionKey, time.Now().Add(hitl.DefaultAttestationTTL))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	err = workflows.SignalHITLDecision(ctx, h.s.temporal, signed)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return h.notWaiting(ctx, d, err)
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: could not deliver the decision (is Temporal reachable?): %v; repeating the same decision is safe", err)
	}
	rec, err := h.waitDecided(ctx, d.InvocationID)
	if err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "the decision was delivered but its outcome is not recorded yet; repeating the same decision returns it, or check with sw4rm hitl history %s", d.InvocationID)
	}
	resp, err := alreadyDecided(rec, d)
	if resp != nil {
		resp.AlreadyDecided = false // this call's decision is the one applied
	}
	return resp, err
}

// notWaiting answers a decision whose signal found no running workflow. Either the run
// finished between our read and the signal — then the outcome is reported — or Temporal,
// restarting, does not find a workflow that is still waiting: then the operator must retry,
// not be told that the invocation is over.
func (h *hitlAdminService) notWaiting(ctx context.Context, d hitl.Decision, signalErr error) (*hitladminpb.DecideResponse, error) {
	desc, err := h.s.temporal.DescribeWorkflowExecution(ctx, hitl.WorkflowID(d.InvocationID), "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, status.Errorf(codes.Unavailable, "internal_error: Temporal did not find the workflow of invocation %s (%v), which is still waiting; repeat the decision when Temporal is reachable", d.InvocationID, signalErr)
	}
	if rec, err := h.waitDecided(ctx, d.InvocationID); err == nil {
		return alreadyDecided(rec, d)
	}
	return nil, status.Errorf(codes.FailedPrecondition, "invocation %s is no longer waiting (its workflow is %s)", d.InvocationID,
		strings.ToLower(strings.TrimPrefix(desc.GetWorkflowExecutionInfo().GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")))
}

// alreadyDecided answers a decision on a decided invocation: the outcome when it is the same
// decision by the same operator, a refusal otherwise.
func alreadyDecided(rec store.HITLRecord, d hitl.Decision) (*hitladminpb.DecideResponse, error) {
	var o hitl.Outcome
	if err := json.Unmarshal(rec.Outcome, &o); err != nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "stored outcome of %s is unreadable: %v", rec.InvocationID, err)
	}
	if o.DecidedBy == d.Operator && o.Decision == d.Decision && !o.Fallback {
		return &hitladminpb.DecideResponse{OutcomeJson: string(rec.Outcome), AlreadyDecided: true}, nil
	}
	return nil, status.Errorf(codes.FailedPrecondition, "invocation %s was already decided: %s by %s at %s (%s)",
		rec.InvocationID, o.Decision, o.DecidedBy, o.DecidedAt.UTC().Format(time.RFC3339), o.Rationale)
}

// waitDecided polls the projection until the workflow recorded the outcome (bounded).
func (h *hitlAdminService) waitDecided(ctx context.Context, id string) (store.HITLRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		rec, err := h.s.store.HITL().GetInvocation(ctx, id)
		if err == nil && rec.Status == store.HITLDecided {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return store.HITLRecord{}, ctx.Err()
		case <-t.C:
		}
	}
}

// History returns the audit trail of HITL interactions.
func (h *hitlAdminService) History(ctx context.Context, req *hitladminpb.HistoryRequest) (*hitladminpb.HistoryResponse, error) {
	if _, err := h.authenticate(ctx); err != nil {
		return nil, err
	}
	evs, err := h.s.store.Audit().List(ctx, store.AuditFilter{TypePrefix: "hitl.", Limit: 10000})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "internal_error: %v", err)
	}
	out := &hitladminpb.HistoryResponse{}
	for _, e := range evs {
		var d struct {
			InvocationID string `json:"invocation_id"`
		}
		_ = json.Unmarshal(e.Details, &d)
		if req.GetInvocationId() != "" && d.InvocationID != req.GetInvocationId() {
			continue
		}
		out.Events = append(out.Events, &hitladminpb.AuditEvent{
			Time: timestamppb.New(e.Time), Actor: e.Actor, Type: e.Type, InvocationId: d.InvocationID, DetailsJson: string(e.Details),
		})
	}
	if lim := int(req.GetLimit()); lim > 0 && len(out.Events) > lim {
		out.Events = out.Events[len(out.Events)-lim:]
	}
	return out, nil
}
