package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/hitlpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/protocol/wire"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// HitlUnavailableDetection bounds how long AskExternalHitl tries to reach an external HITL
// component before declaring it unavailable (§15.4 recommends 5 s).
const HitlUnavailableDetection = 5 * time.Second

// HitlInvocationInput asks RecordHitlInvocation to record a raised invocation.
type HitlInvocationInput struct {
	// Invocation is the invocation.
	Invocation hitl.Invocation
	// WorkflowID is the HITL workflow's ID.
	WorkflowID string
	// Deadline is when the fallback applies.
	Deadline time.Time
	// CreatedAt is when the workflow raised it; fixed so an activity retry does not move it.
	CreatedAt time.Time
	// OmitTokenHashes asks for the policy without token hashes: the run accepts attested
	// decisions only, and the result is recorded in its history. Runs recorded before
	// attested decisions did not set it, and still get the hashes their token decisions need.
	OmitTokenHashes bool
}

// RecordHitlInvocation writes the pending invocation to the store (so `sw4rm hitl list`
// shows it), audits it, and returns the operator policy the workflow authorizes decisions
// with — never tokens, and their hashes only when the run asks for them — and the
// deployment's fallback. An invocation that sets no fallback policy is recorded and audited
// with the fallback it gets (hitl.Policy.FallbackFor), so the record shows the one applied.
func (a *Activities) RecordHitlInvocation(ctx context.Context, in HitlInvocationInput) (hitl.Policy, error) {
	in.Invocation.Fallback = a.HITL.FallbackFor(in.Invocation.Fallback)
	raw, err := json.Marshal(in.Invocation)
	if err != nil {
		return hitl.Policy{}, fmt.Errorf("encode invocation: %w", err)
	}
	err = a.Store.HITL().PutInvocation(ctx, store.HITLRecord{
		InvocationID: in.Invocation.InvocationID, WorkflowID: in.WorkflowID, ReasonType: in.Invocation.ReasonType,
		CorrelationID: in.Invocation.CorrelationID, Subject: in.Invocation.Subject.String(), Priority: in.Invocation.Priority,
		Deadline: in.Deadline, Status: store.HITLPending, Invocation: raw, CreatedAt: in.CreatedAt,
	})
	if errors.Is(err, store.ErrAlreadyDecided) {
		return hitl.Policy{}, temporal.NewNonRetryableApplicationError("invocation "+in.Invocation.InvocationID+" was already decided", "already_decided", err)
	}
	if err != nil {
		return hitl.Policy{}, fmt.Errorf("record invocation: %w", err)
	}
	a.Sink.Record(ctx, audit.Event{
		CorrelationID: in.Invocation.CorrelationID, Actor: actorOr(in.Invocation.RequestedBy), Type: "hitl.invoked",
		Details: map[string]any{"invocation_id": in.Invocation.InvocationID, "reason_type": in.Invocation.ReasonType,
			"subject": in.Invocation.Subject.String(), "priority": in.Invocation.Priority, "deadline": in.Deadline.UTC().Format(time.RFC3339),
			"fallback": in.Invocation.Fallback.Policy, "proposed_actions": in.Invocation.ProposedActions},
	})
	if in.OmitTokenHashes {
		return a.HITL.WithoutTokens(), nil
	}
	return a.HITL, nil
}

// LoadHitlPolicy returns the operator policy this worker holds now — its operators, their
// reason types and public keys, the decision keys; no token hashes, since the result is
// recorded in the workflow's history: a HITL wait reloads it for each attested decision, so
// that keys rotated or revoked while it waits count (§23).
func (a *Activities) LoadHitlPolicy(context.Context) (hitl.Policy, error) {
	return a.HITL.WithoutTokens(), nil
}

// HitlEventInput is an audit event of a HITL wait.
type HitlEventInput struct {
	// InvocationID names the invocation.
	InvocationID string
	// CorrelationID links it to its flow.
	CorrelationID string
	// Type is the event type, e.g. "hitl.decision_refused".
	Type string
	// Actor is who caused it.
	Actor string
	// Details are the specifics.
	Details map[string]any
}

// RecordHitlEvent audits one HITL interaction (§15.1: who, when, why, what changed).
func (a *Activities) RecordHitlEvent(ctx context.Context, in HitlEventInput) error {
	details := map[string]any{"invocation_id": in.InvocationID}
	for k, v := range in.Details {
		details[k] = v
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.CorrelationID, Actor: actorOr(in.Actor), Type: in.Type, Details: details})
	return nil
}

// HitlOutcomeInput asks RecordHitlOutcome to store an outcome.
type HitlOutcomeInput struct {
	// Invocation is the invocation decided.
	Invocation hitl.Invocation
	// Outcome is how it ended.
	Outcome hitl.Outcome
}

// RecordHitlOutcome marks the invocation decided in the store and audits the decision.
func (a *Activities) RecordHitlOutcome(ctx context.Context, in HitlOutcomeInput) error {
	raw, err := json.Marshal(in.Outcome)
	if err != nil {
		return fmt.Errorf("encode outcome: %w", err)
	}
	err = a.Store.HITL().CompleteInvocation(ctx, in.Outcome.InvocationID, raw, in.Outcome.DecidedAt)
	if errors.Is(err, store.ErrAlreadyDecided) {
		return temporal.NewNonRetryableApplicationError("invocation "+in.Outcome.InvocationID+" already has another outcome", "already_decided", err)
	}
	if err != nil {
		return fmt.Errorf("record outcome: %w", err)
	}
	details := map[string]any{"invocation_id": in.Outcome.InvocationID, "reason_type": in.Invocation.ReasonType,
		"decision": string(in.Outcome.Decision), "rationale": in.Outcome.Rationale, "via": in.Outcome.Via,
		"patch_bytes": len(in.Outcome.Patch), "fallback": in.Outcome.Fallback}
	if in.Outcome.Fallback {
		details["fallback_policy"], details["fallback_reason"] = in.Outcome.FallbackPolicy, in.Outcome.FallbackReason
	}
	if in.Outcome.Extensions > 0 {
		details["extensions"] = in.Outcome.Extensions
	}
	// How long it waited, for sw4rm_hitl_wait_seconds (metrics); the projection knows when
	// it was raised.
	if rec, err := a.Store.HITL().GetInvocation(ctx, in.Outcome.InvocationID); err == nil && !rec.CreatedAt.IsZero() && !in.Outcome.DecidedAt.IsZero() {
		details["waited_ms"] = max(0, in.Outcome.DecidedAt.Sub(rec.CreatedAt).Milliseconds())
	}
	a.Sink.Record(ctx, audit.Event{CorrelationID: in.Invocation.CorrelationID, Actor: in.Outcome.DecidedBy, Type: "hitl.decided", Details: details})
	return nil
}

// HitlAgentInput asks SendHitlInvocation to tell the HITL agent of an invocation.
type HitlAgentInput struct {
	// Invocation is the invocation.
	Invocation hitl.Invocation
	// Agent is the HITL agent's agent_id (hitl.Policy.Agent).
	Agent string
	// Deadline is when the invocation's fallback applies, the payload's deadline_ts.
	Deadline time.Time
}

// HitlAgentDelivery is what SendHitlInvocation did.
type HitlAgentDelivery struct {
	// Delivered is true once the envelope is in the agent's buffer.
	Delivered bool
	// MessageID is the envelope's message_id (hitl.InvocationMessageID).
	MessageID string
	// Reason says why it was not delivered.
	Reason string `json:",omitempty"`
}

// SendHitlInvocation sends the HITL agent the invocation as a HITL_INVOCATION envelope from
// the scheduler (§15, §15.2; hitl.InvocationEnvelope) on the PRIVILEGED lane, like the
// scheduler's other control traffic, once: its message_id derives from the invocation id, so
// a retry finds it admitted. An agent that is not registered is not delivered to, which the
// result says, and the wait decides what that means (§15.4).
func (a *Activities) SendHitlInvocation(ctx context.Context, in HitlAgentInput) (HitlAgentDelivery, error) {
	env, err := hitl.InvocationEnvelope(in.Invocation, in.Deadline)
	if err != nil {
		return HitlAgentDelivery{}, temporal.NewNonRetryableApplicationError("encode the invocation: "+err.Error(), "validation_error", err)
	}
	out := HitlAgentDelivery{MessageID: env.GetMessageId()}
	if _, err := a.Router.Agent(ctx, in.Agent); errors.Is(err, store.ErrNotFound) {
		out.Reason = "HITL agent " + in.Agent + " is not registered"
		return out, nil
	} else if err != nil {
		return out, fmt.Errorf("look up HITL agent %s: %w", in.Agent, err)
	}
	err = a.Router.Notify(ctx, in.Agent, env)
	switch {
	case errors.Is(err, store.ErrDuplicateMessage):
		// A retry after a lost answer: the envelope is there already, and was audited.
	case err != nil:
		return out, fmt.Errorf("send invocation %s to HITL agent %s: %w", in.Invocation.InvocationID, in.Agent, err)
	default:
		a.Sink.Record(ctx, audit.Event{CorrelationID: in.Invocation.CorrelationID, Actor: protocol.SchedulerID, Type: "hitl.sent",
			AgentID: in.Agent, MessageID: env.GetMessageId(),
			Details: map[string]any{"invocation_id": in.Invocation.InvocationID, "agent": in.Agent, "reason_type": in.Invocation.ReasonType}})
	}
	out.Delivered = true
	return out, nil
}

// AskExternalHitl forwards an invocation to the configured external HITL component (a
// server of the canonical sw4rm.hitl.HitlService) and waits for its decision. The component
// must answer its health check within HitlUnavailableDetection, else the activity fails with
// the non-retryable type "hitl_unavailable" and the workflow applies hitl_unavailable_policy.
func (a *Activities) AskExternalHitl(ctx context.Context, inv hitl.Invocation) (hitl.Outcome, error) {
	unavailable := func(err error) error {
		return temporal.NewNonRetryableApplicationError("hitl_unavailable: external HITL component "+a.HITL.External+" is unavailable: "+err.Error(), "hitl_unavailable", err)
	}
	conn, err := grpc.NewClient(a.HITL.External, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return hitl.Outcome{}, unavailable(err)
	}
	defer conn.Close()
	hctx, cancel := context.WithTimeout(ctx, HitlUnavailableDetection)
	resp, err := healthpb.NewHealthClient(conn).Check(hctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	cancel()
	if err != nil {
		return hitl.Outcome{}, unavailable(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return hitl.Outcome{}, unavailable(fmt.Errorf("health status %s", resp.GetStatus()))
	}
	// Heartbeat while the human thinks, so a dead worker is noticed and the wait moves on.
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	ctxJSON, _ := json.Marshal(inv.Context)
	// The invocation's id is the key: a retried activity, or the workflow asking again after
	// the component was unavailable, attaches to the question it already asked (docs/hitl.md)
	// instead of raising a second one.
	kctx := metadata.AppendToOutgoingContext(ctx, wire.IdempotencyKey, inv.InvocationID)
	dec, err := hitlpb.NewHitlServiceClient(conn).Decide(kctx, &hitlpb.HitlInvocation{
		ReasonType: commonpb.HitlReasonType(commonpb.HitlReasonType_value[inv.ReasonType]), Context: ctxJSON,
		ProposedActions: inv.ProposedActions, Priority: inv.Priority,
	})
	if err != nil {
		return hitl.Outcome{}, unavailable(err)
	}
	action, err := hitl.ParseAction(dec.GetAction())
	if err != nil {
		return hitl.Outcome{}, temporal.NewNonRetryableApplicationError("external HITL component answered an invalid decision: "+err.Error(), "validation_error", err)
	}
	return hitl.Outcome{
		InvocationID: inv.InvocationID, Decision: action, Rationale: dec.GetRationale(), Patch: dec.GetDecisionPayload(),
		DecidedBy: "external:" + a.HITL.External, Via: "external",
	}, nil
}

func actorOr(a string) string {
	if a == "" {
		return protocol.SchedulerID
	}
	return a
}
