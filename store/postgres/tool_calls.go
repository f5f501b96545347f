package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

// toolCallsStore implements store.ToolCalls on tool_calls and tool_frames (migration 00016).
type toolCallsStore Store

func (c *toolCallsStore) s() *Store { return (*Store)(c) }

// ToolCalls implements store.Store.
func (s *Store) ToolCalls() store.ToolCalls { return (*toolCallsStore)(s) }

const toolCallColumns = `call_id, caller, provider_id, tool_name, frames, bytes, final, created_at`

func scanToolCall(row pgx.Row) (store.ToolCallRecord, error) {
	var r store.ToolCallRecord
	var frames, nbytes int64
	if err := row.Scan(&r.CallID, &r.Caller, &r.ProviderID, &r.ToolName, &frames, &nbytes, &r.Final, &r.CreatedAt); err != nil {
		return store.ToolCallRecord{}, err
	}
	r.Frames, r.Bytes, r.CreatedAt = uint64(frames), uint64(nbytes), r.CreatedAt.UTC()
	return r, nil
}

// CreateCall implements store.ToolCalls: ON CONFLICT DO NOTHING and, when the row is new,
// its handoffs in the same transaction; else the stored row.
func (c *toolCallsStore) CreateCall(ctx context.Context, rec store.ToolCallRecord, entries ...store.OutboxEntry) (store.ToolCallRecord, bool, error) {
	if rec.CallID == "" {
		return store.ToolCallRecord{}, false, errors.New("postgres: create tool call: call_id is required")
	}
	var out store.ToolCallRecord
	created := false
	err := pgx.BeginFunc(ctx, c.s().pool, func(tx pgx.Tx) error {
		r, err := scanToolCall(tx.QueryRow(ctx, `INSERT INTO tool_calls (call_id, caller, provider_id, tool_name)
			VALUES ($1, $2, $3, $4) ON CONFLICT (call_id) DO NOTHING RETURNING `+toolCallColumns,
			rec.CallID, rec.Caller, rec.ProviderID, rec.ToolName))
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // known: write nothing
		}
		if err != nil {
			return err
		}
		out, created = r, true
		return writeOutbox(ctx, tx, entries)
	})
	if err != nil {
		return store.ToolCallRecord{}, false, fmt.Errorf("postgres: create tool call %q: %w", rec.CallID, unavailable(err))
	}
	if created {
		return out, true, nil
	}
	out, err = c.GetCall(ctx, rec.CallID)
	return out, false, err
}

// GetCall implements store.ToolCalls.
func (c *toolCallsStore) GetCall(ctx context.Context, callID string) (store.ToolCallRecord, error) {
	r, err := scanToolCall(c.s().pool.QueryRow(ctx, `SELECT `+toolCallColumns+` FROM tool_calls WHERE call_id = $1`, callID))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ToolCallRecord{}, store.ErrNotFound
	}
	if err != nil {
		return store.ToolCallRecord{}, fmt.Errorf("postgres: get tool call %q: %w", callID, err)
	}
	return r, nil
}

// OpenCalls implements store.ToolCalls; the partial indexes of migration 00021 keep it to
// the open calls.
func (c *toolCallsStore) OpenCalls(ctx context.Context, caller, providerID string) ([]store.ToolCallRecord, error) {
	rows, err := c.s().pool.Query(ctx, `SELECT `+toolCallColumns+` FROM tool_calls WHERE NOT final AND caller = $1 AND $1 <> ''
		UNION SELECT `+toolCallColumns+` FROM tool_calls WHERE NOT final AND provider_id = $2 AND $2 <> ''
		ORDER BY created_at, call_id`, caller, providerID)
	if err != nil {
		return nil, fmt.Errorf("postgres: open tool calls of %q/%q: %w", caller, providerID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ToolCallRecord, error) { return scanToolCall(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: open tool calls of %q/%q: %w", caller, providerID, err)
	}
	return out, nil
}

// ListCalls implements store.ToolCalls: the calls with the summary of their final frame,
// if any (a call has at most one final frame).
func (c *toolCallsStore) ListCalls(ctx context.Context, f store.ToolCallFilter) ([]store.ListedToolCall, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = store.DefaultToolCallListLimit
	}
	rows, err := c.s().pool.Query(ctx, `SELECT c.call_id, c.caller, c.provider_id, c.tool_name, c.frames, c.bytes, c.final, c.created_at,
			COALESCE(f.summary, ''::bytea)
		FROM tool_calls c LEFT JOIN tool_frames f ON f.call_id = c.call_id AND f.final
		WHERE ($1 = '' OR c.caller = $1) AND ($2 = '' OR c.provider_id = $2) AND ($3 = '' OR c.tool_name = $3)
			AND ($4 = 0 OR ($4 = 1 AND NOT c.final) OR ($4 = 2 AND c.final))
		ORDER BY c.created_at DESC, c.call_id LIMIT $5`,
		f.Caller, f.ProviderID, f.ToolName, int(f.Phase), limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: list tool calls: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ListedToolCall, error) {
		var l store.ListedToolCall
		var frames, nbytes int64
		if err := row.Scan(&l.CallID, &l.Caller, &l.ProviderID, &l.ToolName, &frames, &nbytes, &l.Final, &l.CreatedAt, &l.Summary); err != nil {
			return store.ListedToolCall{}, err
		}
		l.Frames, l.Bytes, l.CreatedAt = uint64(frames), uint64(nbytes), l.CreatedAt.UTC()
		if len(l.Summary) == 0 {
			l.Summary = nil
		}
		return l, nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list tool calls: %w", err)
	}
	if out == nil {
		out = []store.ListedToolCall{}
	}
	return out, nil
}

// AppendFrame implements store.ToolCalls: one statement bumps the call's totals — locking
// its row, so appends take turns and numbers have no gaps — unless it is final, and inserts
// the frame numbered with the new count.
func (c *toolCallsStore) AppendFrame(ctx context.Context, callID, contentType string, data []byte) (store.ToolFrameRecord, error) {
	f := store.ToolFrameRecord{CallID: callID, ContentType: contentType, Data: nonNil(data)}
	var n int64
	var final bool
	err := c.s().pool.QueryRow(ctx, `WITH bumped AS (
			UPDATE tool_calls SET frames = frames + 1, bytes = bytes + length($3::bytea)
			WHERE call_id = $1 AND NOT final RETURNING call_id, frames
		), ins AS (
			INSERT INTO tool_frames (call_id, frame_no, content_type, data)
			SELECT call_id, frames, $2, $3 FROM bumped RETURNING frame_no, at
		)
		SELECT ins.frame_no, ins.at, false FROM ins
		UNION ALL
		SELECT 0, now(), final FROM tool_calls WHERE call_id = $1 AND NOT EXISTS (SELECT 1 FROM bumped)`,
		callID, contentType, f.Data).Scan(&n, &f.At, &final)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.ToolFrameRecord{}, store.ErrNotFound
	case err != nil:
		return store.ToolFrameRecord{}, fmt.Errorf("postgres: append a frame to tool call %q: %w", callID, err)
	case n == 0:
		return store.ToolFrameRecord{}, store.ErrCallClosed
	}
	f.FrameNo, f.At = uint64(n), f.At.UTC()
	return f, nil
}

// Finish implements store.ToolCalls: in one transaction the call's row is locked, and unless
// it is already final the final frame is inserted with the summary of the totals before it.
func (c *toolCallsStore) Finish(ctx context.Context, callID, contentType string, data []byte, summarize func(frames, bytes uint64) []byte) (store.ToolFrameRecord, bool, error) {
	var out store.ToolFrameRecord
	var created bool
	err := pgx.BeginFunc(ctx, c.s().pool, func(tx pgx.Tx) error {
		var frames, nbytes int64
		var final bool
		if err := tx.QueryRow(ctx, `SELECT frames, bytes, final FROM tool_calls WHERE call_id = $1 FOR UPDATE`, callID).Scan(&frames, &nbytes, &final); err != nil {
			return err
		}
		if final {
			fs, err := framesOf(ctx, tx, callID, uint64(frames-1), 1)
			if err != nil {
				return err
			}
			if len(fs) != 1 {
				return fmt.Errorf("the final frame %d is missing", frames)
			}
			out = fs[0]
			return nil
		}
		var summary []byte
		if summarize != nil {
			summary = summarize(uint64(frames), uint64(nbytes))
		}
		out = store.ToolFrameRecord{CallID: callID, FrameNo: uint64(frames + 1), Final: true, ContentType: contentType, Data: nonNil(data), Summary: nonNil(summary)}
		if _, err := tx.Exec(ctx, `UPDATE tool_calls SET frames = frames + 1, bytes = bytes + length($2::bytea), final = true WHERE call_id = $1`, callID, out.Data); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO tool_frames (call_id, frame_no, final, content_type, data, summary)
			VALUES ($1, $2, true, $3, $4, $5) RETURNING at`, callID, int64(out.FrameNo), contentType, out.Data, out.Summary).Scan(&out.At); err != nil {
			return err
		}
		out.At, created = out.At.UTC(), true
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ToolFrameRecord{}, false, store.ErrNotFound
	}
	if err != nil {
		return store.ToolFrameRecord{}, false, fmt.Errorf("postgres: finish tool call %q: %w", callID, err)
	}
	return out, created, nil
}

// Frames implements store.ToolCalls.
func (c *toolCallsStore) Frames(ctx context.Context, callID string, after uint64, limit int) ([]store.ToolFrameRecord, error) {
	fs, err := framesOf(ctx, c.s().pool, callID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: read the frames of tool call %q: %w", callID, err)
	}
	return fs, nil
}

// querier is what framesOf needs of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func framesOf(ctx context.Context, q querier, callID string, after uint64, limit int) ([]store.ToolFrameRecord, error) {
	lim := int64(limit)
	if limit <= 0 {
		lim = -1
	}
	rows, err := q.Query(ctx, `SELECT frame_no, final, content_type, data, summary, at FROM tool_frames
		WHERE call_id = $1 AND frame_no > $2 ORDER BY frame_no LIMIT CASE WHEN $3::bigint < 0 THEN NULL ELSE $3::bigint END`,
		callID, int64(after), lim)
	if err != nil {
		return nil, err
	}
	out := []store.ToolFrameRecord{}
	for rows.Next() {
		f := store.ToolFrameRecord{CallID: callID}
		var n int64
		if err := rows.Scan(&n, &f.Final, &f.ContentType, &f.Data, &f.Summary, &f.At); err != nil {
			rows.Close()
			return nil, err
		}
		f.FrameNo, f.At = uint64(n), f.At.UTC()
		if len(f.Summary) == 0 {
			f.Summary = nil
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// nonNil turns nil into an empty slice, for NOT NULL bytea columns.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// AcquireSlot implements store.ToolCalls: under a transaction-scoped advisory lock on the
// tool, expired slots are dropped, the call's own slot is renewed, or a new one is taken if
// fewer than limit are held.
func (c *toolCallsStore) AcquireSlot(ctx context.Context, providerID, toolName, callID string, limit int, lease time.Duration) (bool, error) {
	var got bool
	err := pgx.BeginFunc(ctx, c.s().pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('tool_slots/' || $1 || '/' || $2, 0))`, providerID, toolName); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tool_slots WHERE provider_id = $1 AND tool_name = $2 AND expires_at <= now()`, providerID, toolName); err != nil {
			return err
		}
		var held int
		var mine bool
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(bool_or(call_id = $3), false) FROM tool_slots WHERE provider_id = $1 AND tool_name = $2`,
			providerID, toolName, callID).Scan(&held, &mine); err != nil {
			return err
		}
		if !mine && held >= limit {
			return nil
		}
		_, err := tx.Exec(ctx, `INSERT INTO tool_slots (provider_id, tool_name, call_id, expires_at) VALUES ($1, $2, $3, now() + $4::interval)
			ON CONFLICT (provider_id, tool_name, call_id) DO UPDATE SET expires_at = EXCLUDED.expires_at`,
			providerID, toolName, callID, fmt.Sprintf("%d milliseconds", lease.Milliseconds()))
		got = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: acquire a slot of tool %s/%s: %w", providerID, toolName, unavailable(err))
	}
	return got, nil
}

// ReleaseSlot implements store.ToolCalls.
func (c *toolCallsStore) ReleaseSlot(ctx context.Context, providerID, toolName, callID string) error {
	if _, err := c.s().pool.Exec(ctx, `DELETE FROM tool_slots WHERE provider_id = $1 AND tool_name = $2 AND call_id = $3`, providerID, toolName, callID); err != nil {
		return fmt.Errorf("postgres: release a slot of tool %s/%s: %w", providerID, toolName, unavailable(err))
	}
	return nil
}
