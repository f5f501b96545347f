// Package activities holds the side effects that SW4RM workflows perform: writing the
// registry projection and the audit log, and putting envelopes into agents' inbound buffers
// through the router. Workflows reference them as methods of a nil *Activities (typed names,
// checked at compile time); the worker registers one instance that holds the dependencies.
package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/protocol/hitl"
	"github.com/sw4rm/sw4rm-temporal/reasoning"
	"github.com/sw4rm/sw4rm-temporal/repos"
	"github.com/sw4rm/sw4rm-temporal/router"
	"github.com/sw4rm/sw4rm-temporal/store"
	"github.com/sw4rm/sw4rm-temporal/taskadmission"
)

// Activities holds what side effects need: the store, the router and the observability sink.
type Activities struct {
	// Store is the persistent store.
	Store store.Store
	// Router admits envelopes into agents' buffers.
	Router *router.Router
	// Sink records audit events.
	Sink *audit.Sink
	// HITL is the operator policy and external HITL component (§15.1).
	HITL hitl.Policy
	// Scheduler is the task admission policy (§9).
	Scheduler taskadmission.Policy
	// Temporal signals workflows from local activities (SignalWorkflow).
	Temporal client.Client
	// Reasoning evaluates proposals and summarises transcripts (EvaluateDebate, Summarize;
	// reasoning.FromConfig). Nil means reasoning.Builtin: see reasoningEngine.
	Reasoning reasoning.Engine
	// Repos makes and releases the git worktrees agents are bound to (§16; SW4RM_REPOS).
	// Nil means no repository is configured: every bind fails with worktree_not_found.
	Repos *repos.Manager
	// WorktreeUnbound, when set, is called once a binding that holds no worktree any more
	// (UNBOUND, BIND_FAILED) is recorded, so that the process ends the per-worktree MCP
	// servers it no longer needs at once (app's worktree session sweep) rather than at its
	// next interval. It must not block.
	WorktreeUnbound func()
}

// reasoningEngine returns the configured reasoning engine, or reasoning.Builtin when none
// is. It is unexported because the worker registers every exported method of Activities as
// an activity.
func (a *Activities) reasoningEngine() reasoning.Engine {
	if a.Reasoning == nil {
		return reasoning.Builtin{}
	}
	return a.Reasoning
}

// AgentStateInput asks RecordAgentState to record a lifecycle transition.
type AgentStateInput struct {
	// AgentID is the agent.
	AgentID string
	// From is the previous state (unspecified on registration).
	From commonpb.AgentState
	// To is the new state.
	To commonpb.AgentState
	// Reason explains the transition (an error_code for timeouts, §8.3).
	Reason string
	// Final marks the end of the lifecycle (deregistration).
	Final bool
}

// RecordAgentState writes a lifecycle transition to the registry projection and the audit
// log (§8.3: every timeout-triggered transition is logged; §19: every transition is). An agent
// that was deregistered meanwhile has no projection any more, which is not an error.
func (a *Activities) RecordAgentState(ctx context.Context, in AgentStateInput) error {
	if !in.Final {
		if err := a.Store.Registry().SetAgentState(ctx, in.AgentID, in.To); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("record state of %s: %w", in.AgentID, err)
		}
	}
	a.auditAgentState(ctx, in)
	return nil
}

// auditAgentState appends one lifecycle transition to the audit log.
func (a *Activities) auditAgentState(ctx context.Context, in AgentStateInput) {
	typ := "agent.state"
	if in.Final {
		typ = "agent.lifecycle_ended"
	}
	a.Sink.Record(ctx, audit.Event{
		CorrelationID: "agent/" + in.AgentID, Actor: protocol.SchedulerID, Type: typ, AgentID: in.AgentID,
		Details: map[string]any{"from": in.From.String(), "to": in.To.String(), "reason": in.Reason},
	})
}

// Registry events announced to the other agents (§14).
const (
	// AgentJoined announces a registration.
	AgentJoined = "agent_joined"
	// AgentLeft announces a deregistration.
	AgentLeft = "agent_left"
)

// RegistryEventInput asks NotifyRegistryEvent to announce a join or leave.
type RegistryEventInput struct {
	// AgentID is the agent that joined or left.
	AgentID string
	// Name is its descriptor name.
	Name string
	// Capabilities are its capabilities (joins only).
	Capabilities []string
	// Event is AgentJoined or AgentLeft.
	Event string
	// Reason is the deregistration reason (leaves only).
	Reason string
	// EventID identifies the event so receivers can drop the duplicate an activity retry may
	// produce; it is also the notifications' correlation_id.
	EventID string
}

// RegistryEvent is the JSON payload of the NOTIFICATION envelope that announces a join or
// leave to every other registered agent.
type RegistryEvent struct {
	// Event is "agent_joined" or "agent_left".
	Event string `json:"event"`
	// EventID identifies the event.
	EventID string `json:"event_id"`
	// AgentID is the agent that joined or left.
	AgentID string `json:"agent_id"`
	// Name is its descriptor name.
	Name string `json:"name,omitempty"`
	// Capabilities are its capabilities.
	Capabilities []string `json:"capabilities,omitempty"`
	// Reason is the deregistration reason.
	Reason string `json:"reason,omitempty"`
}

// NotifyRegistryEvent sends a NOTIFICATION envelope about a join or leave to every other
// registered agent (§14: the registry broadcasts join/leave events to all participants).
// Delivery is at least once: a retry may repeat a notification, with the same event_id.
func (a *Activities) NotifyRegistryEvent(ctx context.Context, in RegistryEventInput) error {
	agents, err := a.Store.Registry().ListAgents(ctx)
	if err != nil {
		return fmt.Errorf("list agents: %w", err)
	}
	payload, err := json.Marshal(RegistryEvent{Event: in.Event, EventID: in.EventID, AgentID: in.AgentID, Name: in.Name, Capabilities: in.Capabilities, Reason: in.Reason})
	if err != nil {
		return fmt.Errorf("encode registry event: %w", err)
	}
	// One write for the whole broadcast (Router.NotifyAll), not one commit per agent.
	var notices []router.Announcement
	for _, rec := range agents {
		if to := rec.Descriptor.GetAgentId(); to != in.AgentID {
			notices = append(notices, router.Announcement{AgentID: to, Envelope: &commonpb.Envelope{
				MessageId: uuid.NewString(), CorrelationId: in.EventID,
				MessageType: commonpb.MessageType_NOTIFICATION, ContentType: "application/json",
				ContentLength: uint64(len(payload)), Payload: payload,
			}})
		}
	}
	for i, err := range a.Router.NotifyAll(ctx, notices) {
		if err != nil {
			return fmt.Errorf("notify %s: %w", notices[i].AgentID, err)
		}
	}
	a.Sink.Record(ctx, audit.Event{
		CorrelationID: in.EventID, Actor: protocol.SchedulerID, Type: "registry." + in.Event, AgentID: in.AgentID,
		Details: map[string]any{"notified": len(agents) - 1},
	})
	return nil
}
