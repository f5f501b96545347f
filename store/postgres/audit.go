package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// defaultAuditLimit is the List limit used when AuditFilter.Limit is zero (see store.AuditFilter).
const defaultAuditLimit = 1000

// auditLog implements store.AuditLog on the audit_events table.
type auditLog Store

func (a *auditLog) s() *Store { return (*Store)(a) }

// Append implements store.AuditLog. Details must be empty or valid JSON; the column type json
// validates it and keeps the text byte for byte.
func (a *auditLog) Append(ctx context.Context, e store.Event) (store.Event, error) {
	// A zero Time becomes the database clock, so events from every frontend share one clock.
	err := a.s().pool.QueryRow(ctx, `
		INSERT INTO audit_events (time, correlation_id, actor, type, agent_id, message_id, details, hlc, trace_id)
		VALUES (COALESCE($1, now()), $2, $3, $4, $5, $6, $7, $8, $9)
		RETURNING id, time`,
		nullTime(e.Time), e.CorrelationID, e.Actor, e.Type, e.AgentID, e.MessageID, jsonText(e.Details), e.HLC, e.TraceID,
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
	corr, actors, types, agents, msgs, hlcs, traces := column(), column(), column(), column(), column(), column(), column()
	for i, e := range events {
		times[i], corr[i], actors[i], types[i], agents[i], msgs[i], details[i], hlcs[i], traces[i] =
			nullTime(e.Time), e.CorrelationID, e.Actor, e.Type, e.AgentID, e.MessageID, jsonText(e.Details), e.HLC, e.TraceID
	}
	_, err := a.s().pool.Exec(ctx, `
		INSERT INTO audit_events (time, correlation_id, actor, type, agent_id, message_id, details, hlc, trace_id)
		SELECT COALESCE(t, now()), c, ac, ty, ag, m, d::json, h, tr
		FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
			WITH ORDINALITY AS e(t, c, ac, ty, ag, m, d, h, tr, ord)
		ORDER BY ord`, times, corr, actors, types, agents, msgs, details, hlcs, traces)
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
	if !f.Until.IsZero() {
		q.add("time < ?", f.Until)
	}
	limit := q.limit(f.Limit, defaultAuditLimit)
	order := "id"
	if f.OrderByHLC {
		// Text order of hlc is causal order (protocol/hlc); rows without one come first.
		order = "hlc, id"
	}
	// The inner query picks the newest matches, the outer one restores oldest-first order.
	rows, err := a.s().pool.Query(ctx, `
		SELECT id, time, correlation_id, actor, type, agent_id, message_id, details, hlc, trace_id FROM (
			SELECT id, time, correlation_id, actor, type, agent_id, message_id, details::text AS details, hlc, trace_id
			FROM audit_events `+q.where()+`
			ORDER BY id DESC
			LIMIT `+limit+`
		) AS newest ORDER BY `+order, q.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list events: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Event, error) {
		var (
			e       store.Event
			details *string
		)
		if err := row.Scan(&e.ID, &e.Time, &e.CorrelationID, &e.Actor, &e.Type, &e.AgentID, &e.MessageID, &details, &e.HLC, &e.TraceID); err != nil {
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

// MaxHLC implements store.AuditLog, from the end of audit_events_hlc_idx.
func (a *auditLog) MaxHLC(ctx context.Context) (string, error) {
	var hlc *string
	if err := a.s().pool.QueryRow(ctx, `SELECT max(hlc) FROM audit_events WHERE hlc <> ''`).Scan(&hlc); err != nil {
		return "", fmt.Errorf("postgres: max hlc: %w", unavailable(err))
	}
	if hlc == nil {
		return "", nil
	}
	return *hlc, nil
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
