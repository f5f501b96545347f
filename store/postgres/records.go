package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	"github.com/sw4rm/sw4rm-temporal/proto/commonpb"
	"github.com/sw4rm/sw4rm-temporal/proto/registrypb"
	"github.com/sw4rm/sw4rm-temporal/store"
)

// defaultAuditLimit is the List limit used when AuditFilter.Limit is zero (see store.AuditFilter).
const defaultAuditLimit = 1000

// ---------------------------------------------------------------------------------------------
// Registry

type registry Store

func (r *registry) s() *Store { return (*Store)(r) }

// PutAgent implements store.Registry.
func (r *registry) PutAgent(ctx context.Context, rec store.AgentRecord, handoffs ...store.Handoff) error {
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
	queueHandoffs(b, handoffs, store.HandoffLease)
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
func (r *registry) DeleteAgent(ctx context.Context, agentID string, handoffs ...store.Handoff) (bool, error) {
	var removed bool
	err := pgx.BeginFunc(ctx, r.s().pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM agents WHERE agent_id = $1`, agentID)
		if err != nil || tag.RowsAffected() == 0 || len(handoffs) == 0 {
			removed = err == nil && tag.RowsAffected() > 0
			return err
		}
		removed = true
		b := &pgx.Batch{}
		queueHandoffs(b, handoffs, store.HandoffLease)
		return tx.SendBatch(ctx, b).Close()
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

// ---------------------------------------------------------------------------------------------
// Audit log

type auditLog Store

func (a *auditLog) s() *Store { return (*Store)(a) }

// Append implements store.AuditLog. Details must be empty or valid JSON; the column type json
// validates it and keeps the text byte for byte.
func (a *auditLog) Append(ctx context.Context, e store.Event) (store.Event, error) {
	// A zero Time becomes the database clock, so events from every frontend share one clock.
	err := a.s().pool.QueryRow(ctx, `
		INSERT INTO audit_events (time, correlation_id, actor, type, agent_id, message_id, details)
		VALUES (COALESCE($1, now()), $2, $3, $4, $5, $6, $7)
		RETURNING id, time`,
		nullTime(e.Time), e.CorrelationID, e.Actor, e.Type, e.AgentID, e.MessageID, jsonText(e.Details),
	).Scan(&e.ID, &e.Time)
	if err != nil {
		return store.Event{}, fmt.Errorf("postgres: append event %q: %w", e.Type, unavailable(err))
	}
	e.Time = e.Time.UTC()
	e.Details = cloneBytes(e.Details)
	return e, nil
}

// AppendBatch implements store.BatchAuditLog: the whole batch is one INSERT over unnested
// arrays, so a burst of events costs one statement and one commit rather than one statement
// each (the router writes three events per message). Rows take their ids in the batch's order.
func (a *auditLog) AppendBatch(ctx context.Context, events []store.Event) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	column := func() []string { return make([]string, n) }
	times, details := make([]*time.Time, n), make([]*string, n)
	corr, actors, types, agents, msgs := column(), column(), column(), column(), column()
	for i, e := range events {
		times[i], corr[i], actors[i], types[i], agents[i], msgs[i], details[i] =
			nullTime(e.Time), e.CorrelationID, e.Actor, e.Type, e.AgentID, e.MessageID, jsonText(e.Details)
	}
	_, err := a.s().pool.Exec(ctx, `
		INSERT INTO audit_events (time, correlation_id, actor, type, agent_id, message_id, details)
		SELECT COALESCE(t, now()), c, ac, ty, ag, m, d::json
		FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
			WITH ORDINALITY AS e(t, c, ac, ty, ag, m, d, ord)
		ORDER BY ord`, times, corr, actors, types, agents, msgs, details)
	if err != nil {
		return fmt.Errorf("postgres: append %d events: %w", len(events), unavailable(err))
	}
	return nil
}

// List implements store.AuditLog.
func (a *auditLog) List(ctx context.Context, f store.AuditFilter) ([]store.Event, error) {
	var q listQuery
	if f.CorrelationID != "" {
		q.add("correlation_id = ?", f.CorrelationID)
	}
	if f.AgentID != "" {
		q.add("agent_id = ?", f.AgentID)
	}
	if f.MessageID != "" {
		q.add("message_id = ?", f.MessageID)
	}
	if f.TypePrefix != "" {
		// LIKE with the wildcards escaped, so the text_pattern_ops index serves the prefix.
		q.add(`type LIKE ? ESCAPE '\'`, escapeLike(f.TypePrefix)+"%")
	}
	if !f.Since.IsZero() {
		q.add("time >= ?", f.Since)
	}
	limit := q.limit(f.Limit, defaultAuditLimit)
	// The inner query picks the newest matches, the outer one restores oldest-first order.
	rows, err := a.s().pool.Query(ctx, `
		SELECT id, time, correlation_id, actor, type, agent_id, message_id, details FROM (
			SELECT id, time, correlation_id, actor, type, agent_id, message_id, details::text AS details
			FROM audit_events `+q.where()+`
			ORDER BY id DESC
			LIMIT `+limit+`
		) AS newest ORDER BY id`, q.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Event, error) {
		var (
			e       store.Event
			details *string
		)
		if err := row.Scan(&e.ID, &e.Time, &e.CorrelationID, &e.Actor, &e.Type, &e.AgentID, &e.MessageID, &details); err != nil {
			return store.Event{}, err
		}
		e.Time = e.Time.UTC()
		if details != nil && *details != "" {
			e.Details = []byte(*details)
		}
		return e, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list events: %w", err)
	}
	return out, nil
}

// jsonText passes details to the json column as text (nil for NULL), so PostgreSQL validates
// and stores it verbatim rather than pgx re-encoding a []byte as a JSON string.
func jsonText(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// escapeLike escapes LIKE's wildcards and its escape character.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// cloneBytes copies b; empty becomes nil, as a NULL column reads back.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// ---------------------------------------------------------------------------------------------
// Artifacts

type artifacts Store

func (a *artifacts) s() *Store { return (*Store)(a) }

// AppendArtifact implements store.Artifacts.
func (a *artifacts) AppendArtifact(ctx context.Context, art store.Artifact) error {
	if art.NegotiationID == "" {
		return errors.New("postgres: append artifact: negotiation_id is required")
	}
	tag, err := a.s().pool.Exec(ctx, `
		INSERT INTO artifacts (negotiation_id, kind, version, content_type, content)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT ON CONSTRAINT artifacts_negotiation_kind_version_key DO NOTHING`,
		art.NegotiationID, art.Kind, art.Version, art.ContentType, nullBytes(art.Content))
	if err != nil {
		return fmt.Errorf("postgres: append artifact %s/%s/%s: %w", art.NegotiationID, art.Kind, art.Version, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: artifact %s/%s/%s: %w", art.NegotiationID, art.Kind, art.Version, store.ErrDuplicateArtifact)
	}
	return nil
}

// ListArtifacts implements store.Artifacts.
func (a *artifacts) ListArtifacts(ctx context.Context, negotiationID, kind string) ([]store.Artifact, error) {
	rows, err := a.s().pool.Query(ctx, `
		SELECT negotiation_id, kind, version, content_type, content, created_at
		FROM artifacts
		WHERE negotiation_id = $1 AND ($2 = '' OR kind = $2)
		ORDER BY id`, negotiationID, kind)
	if err != nil {
		return nil, fmt.Errorf("postgres: list artifacts of %q: %w", negotiationID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Artifact, error) {
		var x store.Artifact
		if err := row.Scan(&x.NegotiationID, &x.Kind, &x.Version, &x.ContentType, &x.Content, &x.CreatedAt); err != nil {
			return store.Artifact{}, err
		}
		x.Content = cloneBytes(x.Content)
		x.CreatedAt = x.CreatedAt.UTC()
		return x, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list artifacts of %q: %w", negotiationID, err)
	}
	return out, nil
}
