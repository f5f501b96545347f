package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// registry implements store.Registry on the agents table.
type registry Store

func (r *registry) s() *Store { return (*Store)(r) }

// PutAgent implements store.Registry.
func (r *registry) PutAgent(ctx context.Context, rec store.AgentRecord, entries ...store.OutboxEntry) error {
	id := rec.Descriptor.GetAgentId()
	if id == "" {
		return errors.New("postgres: put agent: descriptor with an agent_id is required")
	}
	desc, err := proto.Marshal(rec.Descriptor)
	if err != nil {
		return fmt.Errorf("postgres: put agent %q: marshal descriptor: %w", id, err)
	}
	health, err := marshalHealth(rec.Health)
	if err != nil {
		return fmt.Errorf("postgres: put agent %q: %w", id, err)
	}
	// The record and its handoffs commit together, or neither does.
	b := &pgx.Batch{}
	b.Queue(`
		INSERT INTO agents (agent_id, descriptor, state, health, registered_at, last_heartbeat)
		VALUES ($1, $2, $3, $4, COALESCE($5, now()), $6)
		ON CONFLICT (agent_id) DO UPDATE SET
			descriptor = EXCLUDED.descriptor, state = EXCLUDED.state, health = EXCLUDED.health,
			registered_at = EXCLUDED.registered_at, last_heartbeat = EXCLUDED.last_heartbeat`,
		id, desc, int32(rec.State), health, nullTime(rec.RegisteredAt), nullTime(rec.LastHeartbeat))
	queueOutbox(b, entries, store.OutboxLease)
	err = pgx.BeginFunc(ctx, r.s().pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("postgres: put agent %q: %w", id, err)
	}
	return nil
}

const agentColumns = `descriptor, state, health, registered_at, last_heartbeat`

// GetAgent implements store.Registry.
func (r *registry) GetAgent(ctx context.Context, agentID string) (store.AgentRecord, error) {
	rows, err := r.s().pool.Query(ctx, `SELECT `+agentColumns+` FROM agents WHERE agent_id = $1`, agentID)
	if err != nil {
		return store.AgentRecord{}, fmt.Errorf("postgres: get agent %q: %w", agentID, err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, scanAgent)
	if err != nil {
		return store.AgentRecord{}, fmt.Errorf("postgres: get agent %q: %w", agentID, notFound(err))
	}
	return rec, nil
}

// ListAgents implements store.Registry.
func (r *registry) ListAgents(ctx context.Context) ([]store.AgentRecord, error) {
	// COLLATE "C" orders by bytes, as Go's string comparison (and store/memory) does,
	// whatever the database's default collation.
	rows, err := r.s().pool.Query(ctx, `SELECT `+agentColumns+` FROM agents ORDER BY agent_id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list agents: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanAgent)
	if err != nil {
		return nil, fmt.Errorf("postgres: list agents: %w", err)
	}
	return out, nil
}

// DeleteAgent implements store.Registry.
func (r *registry) DeleteAgent(ctx context.Context, agentID string, entries ...store.OutboxEntry) (bool, error) {
	var removed bool
	err := pgx.BeginFunc(ctx, r.s().pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM agents WHERE agent_id = $1`, agentID)
		if err != nil || tag.RowsAffected() == 0 || len(entries) == 0 {
			removed = err == nil && tag.RowsAffected() > 0
			return err
		}
		removed = true
		return writeOutbox(ctx, tx, entries)
	})
	if err != nil {
		return false, fmt.Errorf("postgres: delete agent %q: %w", agentID, err)
	}
	return removed, nil
}

// RecordHeartbeat implements store.Registry.
func (r *registry) RecordHeartbeat(ctx context.Context, agentID string, health map[string]string, at time.Time) error {
	h, err := marshalHealth(health)
	if err != nil {
		return fmt.Errorf("postgres: heartbeat of %q: %w", agentID, err)
	}
	tag, err := r.s().pool.Exec(ctx, `UPDATE agents SET health = $2, last_heartbeat = $3 WHERE agent_id = $1`,
		agentID, h, nullTime(at))
	if err != nil {
		return fmt.Errorf("postgres: heartbeat of %q: %w", agentID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: heartbeat of %q: %w", agentID, store.ErrNotFound)
	}
	return nil
}

// SetAgentState implements store.Registry.
func (r *registry) SetAgentState(ctx context.Context, agentID string, state commonpb.AgentState) error {
	tag, err := r.s().pool.Exec(ctx, `UPDATE agents SET state = $2 WHERE agent_id = $1`, agentID, int32(state))
	if err != nil {
		return fmt.Errorf("postgres: set state of %q: %w", agentID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: set state of %q: %w", agentID, store.ErrNotFound)
	}
	return nil
}

func scanAgent(row pgx.CollectableRow) (store.AgentRecord, error) {
	var (
		rec           store.AgentRecord
		desc, health  []byte
		state         int32
		lastHeartbeat *time.Time
	)
	if err := row.Scan(&desc, &state, &health, &rec.RegisteredAt, &lastHeartbeat); err != nil {
		return store.AgentRecord{}, err
	}
	d := &registrypb.AgentDescriptor{}
	if err := proto.Unmarshal(desc, d); err != nil {
		return store.AgentRecord{}, fmt.Errorf("unmarshal descriptor: %w", err)
	}
	rec.Descriptor = d
	rec.State = commonpb.AgentState(state)
	if len(health) > 0 {
		if err := json.Unmarshal(health, &rec.Health); err != nil {
			return store.AgentRecord{}, fmt.Errorf("unmarshal health: %w", err)
		}
		if len(rec.Health) == 0 {
			rec.Health = nil
		}
	}
	rec.RegisteredAt = utc(rec.RegisteredAt)
	if lastHeartbeat != nil {
		rec.LastHeartbeat = lastHeartbeat.UTC()
	}
	return rec, nil
}

// marshalHealth encodes a health map for the jsonb column; an empty map is stored as NULL.
func marshalHealth(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("marshal health: %w", err)
	}
	return b, nil
}
