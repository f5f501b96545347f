package frontend

import (
	"context"
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/auth"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/policypb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/negotiation"
)

// Audit event types of the scheduler's policy RPCs.
const (
	// AuditNegotiationPolicySet records a stored base policy or set of profiles.
	AuditNegotiationPolicySet = "negotiation.policy_set"
	// AuditNegotiationPolicyRefused records a policy or profile set refused by the rules.
	AuditNegotiationPolicyRefused = "negotiation.policy_refused"
)

// schedulerPolicyService serves sw4rm.scheduler.SchedulerPolicyService, the scheduler's
// negotiation policy (§17.2: "The Scheduler is the source of truth for negotiation policy").
// This file holds the policy store's four RPCs — SetNegotiationPolicy, GetNegotiationPolicy,
// SetPolicyProfiles, ListPolicyProfiles — kept in store.NegotiationPolicies. Setting is an
// operator's (frontend/authz.go), reading any proven caller's, and every set is audited.
//
// Refusals: a request without the message it sets (SetNegotiationPolicy without policy) is
// malformed and answers InvalidArgument with validation_error. A well-formed request whose
// policy or profiles break §17.2's rules answers status OK with ok=false and a reason that
// starts with "validation_error: " and names every problem, since the response has ok and
// reason fields for exactly that; nothing is stored, and the refusal is audited too.
type schedulerPolicyService struct {
	schedulerpb.UnimplementedSchedulerPolicyServiceServer
	s *Server
}

// SetNegotiationPolicy validates and stores the base negotiation policy every negotiation's
// effective policy starts from (§17.2). It replaces the previous one whole: zero fields mean
// "unset" (the intensity's defaults apply).
func (ps *schedulerPolicyService) SetNegotiationPolicy(ctx context.Context, req *schedulerpb.SetNegotiationPolicyRequest) (*schedulerpb.SetNegotiationPolicyResponse, error) {
	p := req.GetPolicy()
	if p == nil {
		return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR,
			"policy is required: send the whole base policy (zero fields mean unset, §17.2)")
	}
	by := auth.FromContext(ctx).String()
	if err := negotiation.ValidatePolicy(p); err != nil {
		reason := "validation_error: " + err.Error()
		ps.audit(ctx, by, AuditNegotiationPolicyRefused, map[string]any{"scope": "base", "reason": reason, "policy": policyDetails(p)})
		return &schedulerpb.SetNegotiationPolicyResponse{Ok: false, Reason: reason}, nil
	}
	if err := ps.s.store.NegotiationPolicies().SetBasePolicy(ctx, p, by); err != nil {
		return nil, failed("store the base negotiation policy", err)
	}
	ps.audit(ctx, by, AuditNegotiationPolicySet, map[string]any{"scope": "base", "policy": policyDetails(p)})
	return &schedulerpb.SetNegotiationPolicyResponse{Ok: true}, nil
}

// GetNegotiationPolicy answers the base negotiation policy; policy is unset when none was
// ever set (negotiations then start from their intensity's defaults).
func (ps *schedulerPolicyService) GetNegotiationPolicy(ctx context.Context, _ *schedulerpb.GetNegotiationPolicyRequest) (*schedulerpb.GetNegotiationPolicyResponse, error) {
	p, err := ps.s.store.NegotiationPolicies().GetBasePolicy(ctx)
	if err != nil {
		return nil, failed("read the base negotiation policy", err)
	}
	return &schedulerpb.GetNegotiationPolicyResponse{Policy: p}, nil
}

// SetPolicyProfiles validates and stores the named policy profiles a negotiation's profile
// hint selects (§17.2), replacing every existing profile at once: afterwards exactly these
// exist, and an empty list removes them all. Names must be non-blank, unique and at most
// negotiation.MaxProfileNameLength characters; each policy follows SetNegotiationPolicy's rules.
func (ps *schedulerPolicyService) SetPolicyProfiles(ctx context.Context, req *schedulerpb.SetPolicyProfilesRequest) (*schedulerpb.SetPolicyProfilesResponse, error) {
	profiles := req.GetProfiles()
	by := auth.FromContext(ctx).String()
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.GetName()
	}
	if err := negotiation.ValidateProfiles(profiles); err != nil {
		reason := "validation_error: " + err.Error()
		ps.audit(ctx, by, AuditNegotiationPolicyRefused, map[string]any{"scope": "profiles", "reason": reason, "profiles": names})
		return &schedulerpb.SetPolicyProfilesResponse{Ok: false, Reason: reason}, nil
	}
	if err := ps.s.store.NegotiationPolicies().SetProfiles(ctx, profiles, by); err != nil {
		return nil, failed("store the policy profiles", err)
	}
	details := make(map[string]any, len(profiles))
	for _, p := range profiles {
		details[p.GetName()] = policyDetails(p.GetPolicy())
	}
	ps.audit(ctx, by, AuditNegotiationPolicySet, map[string]any{"scope": "profiles", "profiles": names, "policies": details})
	return &schedulerpb.SetPolicyProfilesResponse{Ok: true}, nil
}

// ListPolicyProfiles answers every policy profile, sorted by name.
func (ps *schedulerPolicyService) ListPolicyProfiles(ctx context.Context, _ *schedulerpb.ListPolicyProfilesRequest) (*schedulerpb.ListPolicyProfilesResponse, error) {
	profiles, err := ps.s.store.NegotiationPolicies().ListProfiles(ctx)
	if err != nil {
		return nil, failed("list the policy profiles", err)
	}
	return &schedulerpb.ListPolicyProfilesResponse{Profiles: profiles}, nil
}

// audit records a policy event with the proven caller as actor.
func (ps *schedulerPolicyService) audit(ctx context.Context, by, typ string, details map[string]any) {
	if ps.s.sink == nil {
		return
	}
	ps.s.sink.Record(ctx, audit.Event{Actor: by, Type: typ, Details: details})
}

// policyDetails is a policy as audit details: its protojson (proto field names) as a JSON
// object, so the audit row shows the values set.
func policyDetails(p *policypb.NegotiationPolicy) any {
	if p == nil {
		return nil
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(p)
	if err != nil {
		return p.String()
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return string(b)
	}
	return out
}
