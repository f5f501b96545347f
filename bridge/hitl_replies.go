package bridge

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// SetHITLAgent names the deployment's HITL agent (SW4RM_HITL_AGENT; "" for none), whose
// decisions the scheduler takes on the message plane (§15), and the deployment's decision
// key, with which it attests them as the frontend attests its operators'. Call before
// serving.
func (s *Scheduler) SetHITLAgent(agentID string, decisionKey ed25519.PrivateKey) {
	s.hitlAgent, s.decisionKey = agentID, decisionKey
}

// hitlReply takes a HITL_INVOCATION envelope an agent addressed to the scheduler: the HITL
// agent's decision, §15.2's HITL_DECISION object (hitl.DecisionOfEnvelope). Only the
// configured HITL agent may decide (else PERMISSION_DENIED), a malformed decision or one for
// an invocation already decided otherwise is VALIDATION_ERROR, an unknown invocation
// NO_ROUTE; each refusal is also audited as hitl.decision_refused. An accepted decision is
// attested by the decision key — the scheduler vouches for the agent whose message it took —
// and signalled to hitl/<invocation_id>, whose own checks decide whether it stands: the first
// valid decision from any door wins.
func (s *Scheduler) hitlReply(ctx context.Context, env *commonpb.Envelope) (*protocol.Error, error) {
	d, perr, err := s.hitlDecision(ctx, env)
	if err != nil {
		return nil, err
	}
	if perr != nil {
		s.hitlRefused(ctx, env, perr)
		return perr, nil
	}
	if d.InvocationID == "" {
		return nil, nil // a repeat of the decision that was applied
	}
	// A fresh attestation per message: an agent that retries after an error is signed again.
	signed, err := hitl.Attest(d, s.decisionKey, time.Now().Add(hitl.DefaultAttestationTTL))
	if err != nil {
		return protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "%v", err), nil
	}
	if err := workflows.SignalHITLDecision(ctx, s.temporal, signed); err != nil {
		// Not a refusal: the decision may be fine and Temporal away, so the agent retries.
		return nil, fmt.Errorf("deliver the HITL agent's decision on %s: %w", d.InvocationID, err)
	}
	s.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "hitl.decision_received",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(),
		Details: map[string]any{"invocation_id": d.InvocationID, "decision": string(d.Decision), "via": hitl.ViaMessage}})
	return nil, nil
}

// hitlDecision checks a HITL agent's reply and returns the decision to signal; a zero
// decision without refusal is a repeat of the applied one, which changes nothing.
func (s *Scheduler) hitlDecision(ctx context.Context, env *commonpb.Envelope) (hitl.Decision, *protocol.Error, error) {
	if s.hitlAgent == "" {
		return hitl.Decision{}, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED,
			"this deployment has no HITL agent (SW4RM_HITL_AGENT), so no agent decides HITL invocations"), nil
	}
	if env.GetProducerId() != s.hitlAgent {
		return hitl.Decision{}, protocol.Errorf(commonpb.ErrorCode_PERMISSION_DENIED,
			"only the HITL agent %q decides HITL invocations on the message plane, not %q", s.hitlAgent, env.GetProducerId()), nil
	}
	d, perr := hitl.DecisionOfEnvelope(env)
	if perr != nil {
		return d, perr, nil
	}
	if s.store == nil || s.decisionKey == nil {
		return d, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "this server does not take HITL decisions (no store or no HITL decision key)"), nil
	}
	rec, err := s.store.HITL().GetInvocation(ctx, d.InvocationID)
	if errors.Is(err, store.ErrNotFound) {
		return d, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "no HITL invocation %q", d.InvocationID), nil
	}
	if err != nil {
		return d, nil, fmt.Errorf("look up HITL invocation %s: %w", d.InvocationID, err)
	}
	if rec.Status != store.HITLDecided {
		return d, nil, nil
	}
	var o hitl.Outcome
	if err := json.Unmarshal(rec.Outcome, &o); err != nil {
		return d, nil, fmt.Errorf("read the outcome of HITL invocation %s: %w", d.InvocationID, err)
	}
	if o.DecidedBy == d.Operator && o.Via == hitl.ViaMessage && o.Decision == d.Decision {
		return hitl.Decision{}, nil, nil
	}
	return d, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "invocation %s was already decided: %s by %s via %s at %s",
		d.InvocationID, o.Decision, o.DecidedBy, o.Via, o.DecidedAt.UTC().Format(time.RFC3339)), nil
}

// hitlRefused audits a refused HITL reply where `sw4rm hitl history` looks (§15: every HITL
// interaction is logged), naming the invocation when the payload names one.
func (s *Scheduler) hitlRefused(ctx context.Context, env *commonpb.Envelope, perr *protocol.Error) {
	if s.sink == nil {
		return
	}
	var p hitl.DecisionPayload
	_ = json.Unmarshal(env.GetPayload(), &p) // best effort: the refusal may be that it does not parse
	s.sink.Record(ctx, audit.Event{CorrelationID: env.GetCorrelationId(), Actor: env.GetProducerId(), Type: "hitl.decision_refused",
		AgentID: env.GetProducerId(), MessageID: env.GetMessageId(),
		Details: map[string]any{"invocation_id": p.InvocationID, "decision": p.Decision, "via": hitl.ViaMessage,
			"error_code": perr.Code.String(), "reason": perr.Msg}})
}
