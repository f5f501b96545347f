package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitladminpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// GetEffectivePolicy answers the effective policy of a negotiation (§17.2): the one the
// negotiation persisted when it opened (artifact kind "policy", version "effective"), or,
// in the moment before it did, the one its workflow runs. An agent reads only the policy
// of a negotiation it opened or takes part in, unless an ACL rule grants its scope.
func (p *schedulerPolicyService) GetEffectivePolicy(ctx context.Context, req *schedulerpb.GetEffectivePolicyRequest) (*schedulerpb.GetEffectivePolicyResponse, error) {
	id := req.GetNegotiationId()
	if perr := negotiation.ValidateID(id); perr != nil {
		return nil, perr
	}
	// A negotiation's policy is its opener's and participants' (and operators'): another
	// agent needs an ACL grant of negotiation:<id> (decideNegotiation).
	if pr := auth.FromContext(ctx); pr.Agent != "" && pr.Operator == "" {
		st, err := negotiationState(ctx, p.s, id)
		if err != nil {
			return nil, err
		}
		if err := p.s.decideNegotiation(ctx, id, "read", st, true); err != nil {
			return nil, err
		}
	}
	eff, err := p.storedEffective(ctx, id)
	if err != nil {
		return nil, err
	}
	if eff == nil {
		st, err := negotiationState(ctx, p.s, id)
		if err != nil {
			return nil, err
		}
		eff = st.Effective
	}
	return &schedulerpb.GetEffectivePolicyResponse{Effective: eff}, nil
}

// storedEffective reads the effective policy a negotiation persisted, nil when it has not yet.
func (p *schedulerPolicyService) storedEffective(ctx context.Context, id string) (*policypb.EffectivePolicy, error) {
	arts, err := p.s.store.Artifacts().ListArtifacts(ctx, id, "policy")
	if err != nil {
		return nil, failed("artifact lookup", err)
	}
	for _, a := range arts {
		if a.Version != "effective" {
			continue
		}
		var eff policypb.EffectivePolicy
		if err := json.Unmarshal(a.Content, &eff); err != nil {
			return nil, failed("decode the stored effective policy", err)
		}
		return &eff, nil
	}
	return nil, nil
}

// SubmitEvaluation records a participant's EvaluationReport for the current version (§17.3):
// its llm_confidence is the participant's confidence, the report is stored. A report the
// negotiation refuses (not a participant's, nothing to evaluate, closed) answers
// accepted=false with the reason.
func (p *schedulerPolicyService) SubmitEvaluation(ctx context.Context, req *schedulerpb.SubmitEvaluationRequest) (*schedulerpb.SubmitEvaluationResponse, error) {
	if perr := negotiation.ValidateSubmitEvaluation(req); perr != nil {
		return nil, perr
	}
	rep := req.GetReport()
	_, err := negotiationUpdate[int](ctx, p.s, req.GetNegotiationId(), workflows.NegotiationEvaluateUpdate, workflows.NegotiationEvaluation{
		From: rep.GetFromAgent(), Confidence: float64(rep.GetLlmConfidence()), Notes: rep.GetNotes(), Report: rep})
	if reason, refused := refusal(err); refused {
		return &schedulerpb.SubmitEvaluationResponse{Accepted: false, Reason: reason}, nil
	}
	if err != nil {
		return nil, err
	}
	return &schedulerpb.SubmitEvaluationResponse{Accepted: true}, nil
}

// refusal tells a negotiation's own refusal (answered in the response) from a failure to
// reach it (answered as an error); nil is neither.
func refusal(err error) (string, bool) {
	var perr *protocol.Error
	if errors.As(err, &perr) && perr.Code != commonpb.ErrorCode_NO_ROUTE {
		return err.Error(), true
	}
	return "", false
}

// HitlAction is the operator's door to a negotiation's HITL gates and deadlock escalation
// (§17.2, §17): approve (or continue, accept), deny (or reject), modify, defer decide the
// HITL wait the negotiation is in, through the same attested path as HitlAdminService.Decide;
// abort aborts the negotiation. ok=false with the reason when there is nothing to decide.
func (p *schedulerPolicyService) HitlAction(ctx context.Context, req *schedulerpb.HitlActionRequest) (*schedulerpb.HitlActionResponse, error) {
	id := req.GetNegotiationId()
	if perr := negotiation.ValidateID(id); perr != nil {
		return nil, perr
	}
	action := negotiation.HITLActionOf(req.GetAction())
	if action == negotiation.ActionAbort {
		return p.abort(ctx, id, req.GetRationale())
	}
	return p.decideWait(ctx, id, action, req.GetRationale())
}

// abort aborts the negotiation as the calling operator.
func (p *schedulerPolicyService) abort(ctx context.Context, id, reason string) (*schedulerpb.HitlActionResponse, error) {
	by := auth.FromContext(ctx)
	if reason == "" {
		reason = "aborted by " + by.String()
	}
	_, err := negotiationUpdate[string](ctx, p.s, id, workflows.NegotiationAbortUpdate, workflows.NegotiationAbort{By: by.String(), Operator: true, Reason: reason})
	if why, refused := refusal(err); refused {
		return &schedulerpb.HitlActionResponse{Ok: false, Reason: why}, nil
	}
	if err != nil {
		return nil, err
	}
	return &schedulerpb.HitlActionResponse{Ok: true}, nil
}

// decideWait decides the HITL wait the negotiation is in, if it is in one.
func (p *schedulerPolicyService) decideWait(ctx context.Context, id, action, rationale string) (*schedulerpb.HitlActionResponse, error) {
	st, err := negotiationState(ctx, p.s, id)
	if err != nil {
		return nil, err
	}
	if st.HITLInvocationID == "" {
		return &schedulerpb.HitlActionResponse{Ok: false, Reason: "negotiation " + id + " is " + st.Status + ", not waiting for a human"}, nil
	}
	// The negotiation names its wait as it raises it; the wait records itself a moment later.
	if err := p.waitInvocation(ctx, st.HITLInvocationID); err != nil {
		return nil, err
	}
	if rationale == "" {
		rationale = "HitlAction " + action + " on negotiation " + id
	}
	resp, err := (&hitlAdminService{s: p.s}).Decide(ctx, &hitladminpb.DecideRequest{InvocationId: st.HITLInvocationID, Decision: action, Rationale: rationale})
	if err != nil {
		return nil, err
	}
	return &schedulerpb.HitlActionResponse{Ok: true, Reason: resp.GetOutcomeJson()}, nil
}

// waitInvocation waits (briefly) until the HITL projection has the invocation.
func (p *schedulerPolicyService) waitInvocation(ctx context.Context, id string) error {
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, err := p.s.store.HITL().GetInvocation(wctx, id)
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return failed("HITL lookup", err)
		}
		select {
		case <-wctx.Done():
			return status.Errorf(codes.Unavailable, "the negotiation's HITL wait %s is not recorded yet; repeat the action", id)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
