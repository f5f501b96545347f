package frontend

import (
	"context"
	"errors"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/schedulerpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/workflows"
)

// ShutdownAgent starts a graceful shutdown (§8.4): it signals the agent's lifecycle workflow,
// which moves the agent to SHUTTING_DOWN (recorded in the registry projection, so no new task
// is dispatched to it) if the §8 table allows it from the current state. If the agent
// deregisters within the grace period its lifecycle ends normally; otherwise it is marked
// FAILED with agent_shutdown_timeout. A zero grace_period means the default of 30 s.
func (sc *schedulerService) ShutdownAgent(ctx context.Context, req *schedulerpb.ShutdownAgentRequest) (*schedulerpb.ShutdownAgentResponse, error) {
	id := req.GetAgentId()
	if perr := protocol.ValidateAgentID(id); perr != nil {
		return nil, perr
	}
	grace := workflows.DefaultShutdownGrace
	if gp := req.GetGracePeriod(); gp != nil {
		if err := gp.CheckValid(); err != nil {
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "grace_period: %v", err)
		}
		switch d := gp.AsDuration(); {
		case d < 0:
			return nil, protocol.Errorf(commonpb.ErrorCode_VALIDATION_ERROR, "grace_period must not be negative, got %s", d)
		case d > 0:
			grace = d
		}
	}
	if _, err := sc.s.store.Registry().GetAgent(ctx, id); errors.Is(err, store.ErrNotFound) {
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q is not registered", id)
	} else if err != nil {
		return nil, failed("registry lookup", err)
	}
	err := sc.s.temporal.SignalWorkflow(ctx, workflows.AgentWorkflowID(id), "", workflows.AgentShutdownSignal,
		workflows.AgentShutdown{GracePeriod: grace, Reason: "ShutdownAgent"})
	switch {
	case classify(err) == temporalNotFound:
		return nil, protocol.Errorf(commonpb.ErrorCode_NO_ROUTE, "agent %q has no running lifecycle", id)
	case err != nil:
		return nil, temporalUnavailable("signal the lifecycle workflow of "+id+"; retry ShutdownAgent", err)
	}
	sc.s.sink.Record(ctx, audit.Event{CorrelationID: workflows.AgentWorkflowID(id), Actor: protocol.SchedulerID, Type: "registry.shutdown_requested", AgentID: id,
		Details: map[string]any{"grace_period": grace.String()}})
	return &schedulerpb.ShutdownAgentResponse{Ok: true}, nil
}
