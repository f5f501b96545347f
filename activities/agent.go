package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/sw4rm/sw4rm-temporal/audit"
	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/protocol"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// HeartbeatState is the heartbeat monitor's state (§14), kept by the lifecycle workflow.
type HeartbeatState struct {
	// LastSeen is the registry's LastHeartbeat at the last check that saw a new one.
	LastSeen time.Time `json:",omitempty"`
	// Misses counts consecutive intervals without a new heartbeat.
	Misses int `json:",omitempty"`
	// Unavailable is the health flag: set after MaxMisses consecutive misses (the debounce),
	// cleared by the next heartbeat. It never deregisters the agent (§14).
	Unavailable bool `json:",omitempty"`
	// Gone is set when the agent has no registry record any more (deregistered).
	Gone bool `json:",omitempty"`
}

// HeartbeatCheckInput asks CheckHeartbeat to check one interval.
type HeartbeatCheckInput struct {
	// AgentID is the agent.
	AgentID string
	// State is the monitor's state before this check.
	State HeartbeatState
	// MaxMisses is the debounce: consecutive misses before the agent is marked unavailable.
	MaxMisses int
	// Interval is the heartbeat interval, told to the agent.
	Interval time.Duration
}

// HeartbeatRequest is the JSON payload of the HEARTBEAT envelope sent to an agent; the agent
// answers with RegistryService.Heartbeat.
type HeartbeatRequest struct {
	// HeartbeatID identifies the request.
	HeartbeatID string `json:"heartbeat_id"`
	// IntervalMS is the heartbeat interval in milliseconds.
	IntervalMS int64 `json:"interval_ms"`
}

// CheckHeartbeat closes one heartbeat interval (§14): it checks whether the agent heartbeated
// since the last check (the registry's LastHeartbeat moved), counts consecutive misses, records
// agent.unavailable once MaxMisses is reached and agent.available when heartbeats resume, and
// sends the agent the next HEARTBEAT request through the router. It returns the new state.
func (a *Activities) CheckHeartbeat(ctx context.Context, in HeartbeatCheckInput) (HeartbeatState, error) {
	out := in.State
	rec, err := a.Store.Registry().GetAgent(ctx, in.AgentID)
	if errors.Is(err, store.ErrNotFound) {
		out.Gone = true
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("look up %s: %w", in.AgentID, err)
	}
	out.Gone = false
	corr := "agent/" + in.AgentID
	if !rec.LastHeartbeat.IsZero() && rec.LastHeartbeat.After(in.State.LastSeen) {
		out.LastSeen, out.Misses = rec.LastHeartbeat, 0
		if out.Unavailable {
			out.Unavailable = false
			a.Sink.Record(ctx, audit.Event{CorrelationID: corr, Actor: protocol.SchedulerID, Type: "agent.available", AgentID: in.AgentID,
				Details: map[string]any{"last_heartbeat": rec.LastHeartbeat.UTC().Format(time.RFC3339Nano)}})
		}
	} else {
		out.Misses++
		if out.Misses >= max(in.MaxMisses, 1) && !out.Unavailable {
			out.Unavailable = true
			a.Sink.Record(ctx, audit.Event{CorrelationID: corr, Actor: protocol.SchedulerID, Type: "agent.unavailable", AgentID: in.AgentID,
				Details: map[string]any{"missed_intervals": out.Misses, "interval": in.Interval.String()}})
		}
	}
	payload, err := json.Marshal(HeartbeatRequest{HeartbeatID: uuid.NewString(), IntervalMS: in.Interval.Milliseconds()})
	if err != nil {
		return out, fmt.Errorf("encode heartbeat: %w", err)
	}
	env := &commonpb.Envelope{
		MessageId: uuid.NewString(), CorrelationId: corr,
		MessageType: commonpb.MessageType_HEARTBEAT, ContentType: "application/json",
		ContentLength: uint64(len(payload)), Payload: payload,
	}
	if err := a.Router.Notify(ctx, in.AgentID, env); err != nil {
		return out, fmt.Errorf("heartbeat %s: %w", in.AgentID, err)
	}
	return out, nil
}
