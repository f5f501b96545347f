package frontend

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/bridge"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// registryService serves sw4rm.registry.RegistryService (§14).
type registryService struct {
	registrypb.UnimplementedRegistryServiceServer
	s *Server
}

// RegisterAgent validates the descriptor, records it, and starts the agent's lifecycle
// workflow agent/<agent_id> — or signals the running one on re-registration.
func (r *registryService) RegisterAgent(ctx context.Context, req *registrypb.RegisterAgentRequest) (*registrypb.RegisterAgentResponse, error) {
	d, perr := protocol.RegistrationOf(req)
	if perr != nil {
		r.s.sink.Record(ctx, audit.Event{Type: "registry.rejected", AgentID: req.GetAgent().GetAgentId(), Actor: req.GetAgent().GetAgentId(),
			Details: map[string]any{"reason": perr.Error()}})
		return &registrypb.RegisterAgentResponse{Accepted: false, Reason: perr.Error()}, nil
	}
	if err := r.s.keyHandshake(ctx, d); err != nil {
		return nil, err
	}
	start, err := r.record(ctx, d)
	if err != nil {
		return nil, err
	}
	return r.startLifecycle(ctx, d, start), nil
}

// record writes the agent's registry record — keeping the state, heartbeat and health of a
// re-registered agent — together with the outbox entry that starts its lifecycle.
func (r *registryService) record(ctx context.Context, d *registrypb.AgentDescriptor) (store.OutboxEntry, error) {
	id := d.GetAgentId()
	rec := store.AgentRecord{Descriptor: d, State: commonpb.AgentState_INITIALIZING, RegisteredAt: time.Now().UTC()}
	if prev, err := r.s.store.Registry().GetAgent(ctx, id); err == nil {
		rec.State, rec.LastHeartbeat, rec.Health = prev.State, prev.LastHeartbeat, prev.Health
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.OutboxEntry{}, failed("registry lookup", err)
	}
	in := workflows.AgentLifecycleInput{AgentID: id, Name: d.GetName(), Capabilities: d.GetCapabilities(), InitTimeout: r.s.cfg.AgentInitTimeout,
		HeartbeatInterval: r.s.cfg.HeartbeatInterval, HeartbeatMisses: r.s.cfg.HeartbeatMisses,
		PreemptTimeout: r.s.cfg.PreemptTimeout, TerminateGrace: r.s.cfg.TerminateGrace, HistoryLimit: r.s.cfg.AgentHistoryLimit}
	// The registry record and the start of the lifecycle are one store write: the start
	// travels as an outbox entry in the record's transaction, so no registered agent is ever
	// left without its lifecycle, whatever fails next (docs/reliability.md).
	start, err := bridge.NewOutboxEntry(workflows.OutboxAgentRegister, workflows.AgentWorkflowID(id), workflows.AgentRegisterPayload{
		Input: in, Registration: workflows.AgentRegistration{Name: d.GetName(), Capabilities: d.GetCapabilities()}})
	if err != nil {
		return store.OutboxEntry{}, protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "%v", err)
	}
	if err := r.s.store.Registry().PutAgent(ctx, rec, start); err != nil {
		return store.OutboxEntry{}, failed("registry write", err)
	}
	r.s.router.ForgetAgent(id)
	return start, nil
}

// startLifecycle delivers the lifecycle's start now, audits the registration and answers it.
func (r *registryService) startLifecycle(ctx context.Context, d *registrypb.AgentDescriptor, start store.OutboxEntry) *registrypb.RegisterAgentResponse {
	id := d.GetAgentId()
	details := map[string]any{"name": d.GetName(), "communication_class": d.GetCommunicationClass().String(), "modalities": d.GetModalitiesSupported(), "lifecycle": "started"}
	resp := &registrypb.RegisterAgentResponse{Accepted: true}
	if err := r.s.relay.Deliver(ctx, start); err != nil {
		// Registered all the same: the relay starts the lifecycle once Temporal takes it, and
		// the agent's next heartbeat or stream then shows its readiness.
		r.s.log.Warn("agent registered; its lifecycle starts when Temporal is reachable", "agent_id", id, "error", err)
		details["lifecycle"], details["lifecycle_error"] = "pending", err.Error()
		resp.Reason = "registered; the lifecycle workflow " + workflows.AgentWorkflowID(id) + " starts as soon as Temporal is reachable"
	}
	r.s.sink.Record(ctx, audit.Event{CorrelationID: workflows.AgentWorkflowID(id), Actor: id, Type: "registry.registered", AgentID: id, Details: details})
	return resp
}

// Heartbeat records liveness (§14); the first one also shows readiness to a still
// INITIALIZING lifecycle, and a state that differs from the projection's is reported to the
// lifecycle workflow (§8), which applies it if the transition is legal.
func (r *registryService) Heartbeat(ctx context.Context, req *registrypb.HeartbeatRequest) (*registrypb.HeartbeatResponse, error) {
	id := req.GetAgentId()
	if perr := protocol.ValidateAgentID(id); perr != nil {
		return nil, perr
	}
	rec, err := r.recordHeartbeat(ctx, id, req.GetHealth())
	if err != nil {
		return nil, err
	}
	if rec.State == commonpb.AgentState_INITIALIZING {
		r.s.signalReady(ctx, id, "heartbeat")
	}
	r.reportState(ctx, id, rec.State, req.GetState())
	return &registrypb.HeartbeatResponse{Ok: true}, nil
}

// recordHeartbeat stores a registered agent's heartbeat and returns its record as it was.
func (r *registryService) recordHeartbeat(ctx context.Context, id string, health map[string]string) (store.AgentRecord, error) {
	rec, err := r.s.store.Registry().GetAgent(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered; call RegisterAgent first", id)
	}
	if err != nil {
		return rec, failed("registry lookup", err)
	}
	if err := r.s.store.Registry().RecordHeartbeat(ctx, id, health, time.Now().UTC()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return rec, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q was deregistered", id)
		}
		return rec, failed("heartbeat write", err)
	}
	return rec, nil
}

// reportState passes a reported state that differs from the projection's to the lifecycle
// workflow as a transition request: it applies it only if the §8 table allows it (readiness
// already covers INITIALIZING → RUNNABLE). A failure is logged: the next heartbeat repeats it.
func (r *registryService) reportState(ctx context.Context, id string, current, reported commonpb.AgentState) {
	if reported == commonpb.AgentState_AGENT_STATE_UNSPECIFIED || reported == current ||
		(current == commonpb.AgentState_INITIALIZING && reported == commonpb.AgentState_RUNNABLE) {
		return
	}
	if err := r.s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(id), "", workflows.AgentStateReportSignal,
		workflows.AgentStateReport{State: reported, Via: "heartbeat"}); err != nil {
		r.s.log.Warn("could not signal a reported agent state", "agent_id", id, "state", reported.String(), "error", err)
	}
}

// DeregisterAgent removes the agent from routing at once and ends its lifecycle workflow,
// which announces the leave to the other agents (§14: deregistration is explicit). The end of
// the lifecycle is an outbox entry written with the removal, so it happens even if Temporal
// is unreachable now (docs/architecture.md, "The outbox").
func (r *registryService) DeregisterAgent(ctx context.Context, req *registrypb.DeregisterAgentRequest) (*registrypb.DeregisterAgentResponse, error) {
	id := req.GetAgentId()
	if perr := protocol.ValidateAgentID(id); perr != nil {
		return nil, perr
	}
	if err := r.deregister(ctx, id, workflows.AgentDeregistration{Reason: req.GetReason()}); err != nil {
		return nil, err
	}
	r.s.sink.Record(ctx, audit.Event{CorrelationID: workflows.AgentWorkflowID(id), Actor: id, Type: "registry.deregistered", AgentID: id,
		Details: map[string]any{"reason": req.GetReason()}})
	return &registrypb.DeregisterAgentResponse{Ok: true}, nil
}

// deregister removes the agent's record with the outbox entry that ends its lifecycle, or,
// when there is no record, ends a lifecycle that may still run directly.
func (r *registryService) deregister(ctx context.Context, id string, dereg workflows.AgentDeregistration) error {
	end, err := bridge.NewOutboxEntry(workflows.OutboxAgentDeregister, workflows.AgentWorkflowID(id), workflows.AgentDeregisterPayload{AgentID: id, Deregistration: dereg})
	if err != nil {
		return protocol.Errorf(commonpb.ErrorCode_INTERNAL_ERROR, "%v", err)
	}
	removed, err := r.s.store.Registry().DeleteAgent(ctx, id, end)
	if err != nil {
		return failed("registry write", err)
	}
	r.s.router.ForgetAgent(id)
	if removed {
		if err := r.s.relay.Deliver(ctx, end); err != nil {
			r.s.log.Warn("agent deregistered; its lifecycle ends when Temporal is reachable", "agent_id", id, "error", err)
		}
		return nil
	}
	// Not in the registry: a lifecycle may still run (its projection was removed by an
	// earlier call), so end it directly; none at all means the agent is unknown.
	err = r.s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(id), "", workflows.AgentDeregisterSignal, dereg)
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered", id)
	case err != nil:
		return status.Errorf(codes.Unavailable, "internal_error: agent %s is not in the registry and its lifecycle workflow could not be reached; retry DeregisterAgent: %v", id, err)
	}
	return nil
}
