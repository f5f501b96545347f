package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// registry implements store.Registry.
type registry Store

func (r *registry) s() *Store { return (*Store)(r) }

// PutAgent implements store.Registry.
func (r *registry) PutAgent(ctx context.Context, rec store.AgentRecord, entries ...store.OutboxEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	id := rec.Descriptor.GetAgentId()
	if id == "" {
		return errors.New("memory: put agent: descriptor with an agent_id is required")
	}
	b, err := proto.Marshal(rec.Descriptor)
	if err != nil {
		return fmt.Errorf("memory: put agent %q: marshal descriptor: %w", id, err)
	}
	row := &agentRow{
		descriptor:    b,
		state:         rec.State,
		health:        copyHealth(rec.Health),
		registeredAt:  normTime(rec.RegisteredAt),
		lastHeartbeat: normTime(rec.LastHeartbeat),
	}
	if row.registeredAt.IsZero() {
		row.registeredAt = now()
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agents[id] = row
	at := now()
	for _, h := range entries {
		s.addOutboxLocked(h, store.OutboxLease, at)
	}
	return nil
}

// GetAgent implements store.Registry.
func (r *registry) GetAgent(ctx context.Context, agentID string) (store.AgentRecord, error) {
	if err := ctx.Err(); err != nil {
		return store.AgentRecord{}, err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.agents[agentID]
	if !ok {
		return store.AgentRecord{}, fmt.Errorf("memory: agent %q: %w", agentID, store.ErrNotFound)
	}
	return row.toRecord()
}

// ListAgents implements store.Registry.
func (r *registry) ListAgents(ctx context.Context) ([]store.AgentRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Sorted(maps.Keys(s.agents))
	out := make([]store.AgentRecord, 0, len(ids))
	for _, id := range ids {
		rec, err := s.agents[id].toRecord()
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// DeleteAgent implements store.Registry.
func (r *registry) DeleteAgent(ctx context.Context, agentID string, entries ...store.OutboxEntry) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.agents[agentID]
	if !ok {
		return false, nil
	}
	delete(s.agents, agentID)
	at := now()
	for _, h := range entries {
		s.addOutboxLocked(h, store.OutboxLease, at)
	}
	return true, nil
}

// RecordHeartbeat implements store.Registry.
func (r *registry) RecordHeartbeat(ctx context.Context, agentID string, health map[string]string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.agents[agentID]
	if !ok {
		return fmt.Errorf("memory: heartbeat of %q: %w", agentID, store.ErrNotFound)
	}
	row.health = copyHealth(health)
	row.lastHeartbeat = normTime(at)
	return nil
}

// SetAgentState implements store.Registry.
func (r *registry) SetAgentState(ctx context.Context, agentID string, state commonpb.AgentState) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := r.s()
	s.mu.Lock()
	defer s.mu.Unlock()
	row, ok := s.agents[agentID]
	if !ok {
		return fmt.Errorf("memory: set state of %q: %w", agentID, store.ErrNotFound)
	}
	row.state = state
	return nil
}

func (a *agentRow) toRecord() (store.AgentRecord, error) {
	desc := &registrypb.AgentDescriptor{}
	if err := proto.Unmarshal(a.descriptor, desc); err != nil {
		return store.AgentRecord{}, fmt.Errorf("memory: unmarshal descriptor: %w", err)
	}
	return store.AgentRecord{
		Descriptor:    desc,
		State:         a.state,
		Health:        copyHealth(a.health),
		RegisteredAt:  a.registeredAt,
		LastHeartbeat: a.lastHeartbeat,
	}, nil
}

// copyHealth copies a health map; an empty map becomes nil, as it does in store/postgres.
func copyHealth(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	return maps.Clone(h)
}
