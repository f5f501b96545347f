package store

import (
	"context"
	"time"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
)

// AgentRecord is the registry's projection of one agent (§14).
type AgentRecord struct {
	// Descriptor is the descriptor the agent registered with.
	Descriptor *registrypb.AgentDescriptor
	// State is the lifecycle state last recorded by the agent's lifecycle workflow (§8).
	State commonpb.AgentState
	// Health is the health map of the last heartbeat.
	Health map[string]string
	// RegisteredAt is when the agent (last) registered.
	RegisteredAt time.Time
	// LastHeartbeat is when the agent last sent a heartbeat; zero if never.
	LastHeartbeat time.Time
}

// Registry is the agent registry projection; the lifecycle workflow owns the state machine,
// this is what routing and discovery read.
type Registry interface {
	// PutAgent inserts or replaces an agent record (registration and re-registration) and
	// writes outbox entries (the start of its lifecycle workflow) to the Outbox in the same
	// transaction, leased for OutboxLease.
	PutAgent(ctx context.Context, rec AgentRecord, entries ...OutboxEntry) error
	// GetAgent returns one agent, or ErrNotFound.
	GetAgent(ctx context.Context, agentID string) (AgentRecord, error)
	// ListAgents returns every registered agent ordered by agent_id.
	ListAgents(ctx context.Context) ([]AgentRecord, error)
	// DeleteAgent removes an agent; it reports whether one was removed. Only when one was, it
	// writes outbox entries (the end of its lifecycle workflow) to the Outbox in the same
	// transaction, leased for OutboxLease.
	DeleteAgent(ctx context.Context, agentID string, entries ...OutboxEntry) (bool, error)
	// RecordHeartbeat stores a heartbeat's time and health map, or returns ErrNotFound.
	RecordHeartbeat(ctx context.Context, agentID string, health map[string]string, at time.Time) error
	// SetAgentState records the lifecycle state, or returns ErrNotFound.
	SetAgentState(ctx context.Context, agentID string, state commonpb.AgentState) error
}
