package postgres

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sw4rm/sw4rm-temporal/store"
)

const (
	// activityPutLockClass is the first key of the two-int4 advisory lock (second key 0) that
	// serializes Puts of every process, so the limits of §10.1 hold under concurrency.
	activityPutLockClass int32 = 0x5341 // "SA"
	// activityHistoryLockClass is the first key of the two-int4 advisory lock taken per agent
	// (second key hashtext(agent_id)) by Complete, so the history eviction of concurrent
	// completions of one agent keeps exactly store.ActivityHistoryPerAgent entries.
	activityHistoryLockClass int32 = 0x5348 // "SH"
)

// activityBuffer is the PostgreSQL activity buffer (§10), tables activity_entries and
// activity_history.
type activityBuffer Store

func (a *activityBuffer) s() *Store { return (*Store)(a) }

var _ store.Store = (*Store)(nil)

// ActivityBuffer returns the store's activity buffer (§10).
func (s *Store) ActivityBuffer() store.ActivityBuffer { return (*activityBuffer)(s) }

const activityColumns = `agent_id, task_id, repo_id, worktree_id, branch, description, waiting_on,
	waiting_since, created_at, scope, job_key, hlc`

const activityHistoryColumns = activityColumns + `, status, completed_at`

// putSQL counts the buffer and, unless a limit of §10.1 refuses a new entry, inserts or
// replaces e in one statement: it runs after the advisory lock statement of its batch, so
// its snapshot (READ COMMITTED: one per statement) sees every earlier Put committed. A
// replacement keeps created_at; replacing an existing entry is never refused. Complete or
// Purge may delete rows meanwhile (they do not take the lock): the insert then only
// restores the count it saw.
const putSQL = `
	WITH cur AS (
		SELECT count(*) AS active, count(*) FILTER (WHERE agent_id = $1) AS agent_active,
			coalesce(bool_or(agent_id = $1 AND task_id = $2), false) AS present
		FROM activity_entries),
	ins AS (
		INSERT INTO activity_entries (agent_id, task_id, repo_id, worktree_id, branch, description,
			waiting_on, waiting_since, created_at, scope, job_key, hlc)
		SELECT $1, $2, $3, $4, $5, $6, $7::text,
			CASE WHEN $7::text = '' THEN NULL ELSE COALESCE($8, now()) END, COALESCE($9, now()), $10, $11, $14
		FROM cur
		WHERE cur.present OR (($12::int <= 0 OR cur.active < $12::int) AND ($13::int <= 0 OR cur.agent_active < $13::int))
		ON CONFLICT ON CONSTRAINT activity_entries_pkey DO UPDATE SET
			repo_id = EXCLUDED.repo_id, worktree_id = EXCLUDED.worktree_id, branch = EXCLUDED.branch,
			description = EXCLUDED.description, waiting_on = EXCLUDED.waiting_on,
			waiting_since = EXCLUDED.waiting_since, scope = EXCLUDED.scope, job_key = EXCLUDED.job_key
		RETURNING 1)
	SELECT active, agent_active, present, EXISTS (SELECT 1 FROM ins) FROM cur`

// Put implements store.ActivityBuffer. Puts run one at a time under a transaction-level
// advisory lock, which makes counting and inserting atomic across processes. The lock and
// putSQL travel as one pgx batch: pgx ends it with a single Sync, and PostgreSQL runs what
// precedes a Sync as one implicit transaction, so a Put costs one round trip and one commit
// rather than five round trips (BEGIN, lock, count, insert, COMMIT).
func (a *activityBuffer) Put(ctx context.Context, e store.ActivityEntry, lim store.ActivityLimits) (store.ActivityUsage, error) {
	lim = lim.Effective()
	usage := store.ActivityUsage{Limits: lim}
	if err := store.ValidateActivityEntry(e); err != nil {
		return usage, fmt.Errorf("postgres: put activity: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock($1, 0)`, activityPutLockClass)
	b.Queue(putSQL, e.AgentID, e.TaskID, e.RepoID, e.WorktreeID, e.Branch, e.Description, e.WaitingOn,
		nullTime(e.WaitingSince), nullTime(e.CreatedAt), e.Scope, e.JobKey, lim.MaxActive, lim.MaxPerAgent, e.HLC)
	var present, stored bool
	br := a.s().pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&usage.Active, &usage.AgentActive, &present, &stored)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return usage, fmt.Errorf("postgres: put activity %s/%s: %w", e.AgentID, e.TaskID, err)
	}
	switch {
	case stored && !present:
		usage.Active++
		usage.AgentActive++
	case !stored && lim.MaxActive > 0 && usage.Active >= lim.MaxActive:
		return usage, &store.ActivityFullError{AgentID: e.AgentID, Limit: lim.MaxActive}
	case !stored:
		return usage, &store.ActivityFullError{AgentID: e.AgentID, PerAgent: true, Limit: lim.MaxPerAgent}
	}
	return usage, nil
}

// Complete implements store.ActivityBuffer. The agent's history lock, the move of the entry
// into the history and the eviction of the agent's oldest history entries travel as one pgx
// batch, which PostgreSQL runs as one implicit transaction (see Put): one round trip where
// BEGIN, lock, move, evict and COMMIT were five. Each statement's snapshot follows the lock,
// so concurrent completions of one agent keep exactly store.ActivityHistoryPerAgent entries.
func (a *activityBuffer) Complete(ctx context.Context, agentID, taskID string, status store.ActivityStatus) (store.ActivityEntry, error) {
	if err := cmp.Or(store.ValidateActivityKey(agentID, taskID), store.ValidateActivityCompletion(status)); err != nil {
		return store.ActivityEntry{}, fmt.Errorf("postgres: complete activity %s/%s: %w", agentID, taskID, err)
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, activityHistoryLockClass, agentID)
	b.Queue(`
		WITH gone AS (
			DELETE FROM activity_entries WHERE agent_id = $1 AND task_id = $2
			RETURNING `+activityColumns+`
		)
		INSERT INTO activity_history (agent_id, task_id, repo_id, worktree_id, branch, description,
			waiting_on, waiting_since, created_at, scope, job_key, hlc, status)
		SELECT agent_id, task_id, repo_id, worktree_id, branch, description, waiting_on,
			waiting_since, created_at, scope, job_key, hlc, $3 FROM gone
		RETURNING `+activityHistoryColumns, agentID, taskID, string(status))
	// Keep the agent's newest ActivityHistoryPerAgent entries.
	b.Queue(`
		DELETE FROM activity_history WHERE agent_id = $1 AND id <= (
			SELECT id FROM activity_history WHERE agent_id = $1 ORDER BY id DESC OFFSET $2 LIMIT 1)`,
		agentID, store.ActivityHistoryPerAgent)
	br := a.s().pool.SendBatch(ctx, b)
	var out store.ActivityEntry
	_, err := br.Exec()
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			out, err = pgx.CollectExactlyOneRow(rows, scanActivityHistory)
			err = notFound(err)
		}
	}
	if err == nil {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("evict history: %w", err)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return store.ActivityEntry{}, fmt.Errorf("postgres: complete activity %s/%s: %w", agentID, taskID, err)
	}
	return out, nil
}

// SetWaitingOn implements store.ActivityBuffer. In UPDATE ... SET every expression sees the
// row as it was, so waiting_since compares against the old waiting_on.
func (a *activityBuffer) SetWaitingOn(ctx context.Context, agentID, taskID, waitingOn string) (store.ActivityEntry, error) {
	if err := cmp.Or(store.ValidateActivityKey(agentID, taskID), store.ValidateActivityText("waiting_on", waitingOn)); err != nil {
		return store.ActivityEntry{}, fmt.Errorf("postgres: set waiting_on of %s/%s: %w", agentID, taskID, err)
	}
	rows, err := a.s().pool.Query(ctx, `
		UPDATE activity_entries SET waiting_on = $3::text,
			waiting_since = CASE WHEN $3::text = '' THEN NULL WHEN waiting_on = $3::text THEN waiting_since ELSE now() END
		WHERE agent_id = $1 AND task_id = $2
		RETURNING `+activityColumns, agentID, taskID, waitingOn)
	if err != nil {
		return store.ActivityEntry{}, fmt.Errorf("postgres: set waiting_on of %s/%s: %w", agentID, taskID, err)
	}
	e, err := pgx.CollectExactlyOneRow(rows, scanActivity)
	if err != nil {
		return store.ActivityEntry{}, fmt.Errorf("postgres: set waiting_on of %s/%s: %w", agentID, taskID, notFound(err))
	}
	return e, nil
}

// activityQuery is the WHERE clause of an ActivityFilter, shared by the active list and the
// history.
func activityQuery(f store.ActivityFilter) listQuery {
	var q listQuery
	for _, c := range []struct{ cond, v string }{
		{"agent_id = ?", f.AgentID}, {"repo_id = ?", f.RepoID}, {"worktree_id = ?", f.WorktreeID}, {"task_id = ?", f.TaskID},
	} {
		if c.v != "" {
			q.add(c.cond, c.v)
		}
	}
	return q
}

// List implements store.ActivityBuffer.
func (a *activityBuffer) List(ctx context.Context, f store.ActivityFilter) ([]store.ActivityEntry, error) {
	if err := store.ValidateActivityFilter(f); err != nil {
		return nil, fmt.Errorf("postgres: list activity: %w", err)
	}
	q := activityQuery(f)
	limit := q.limit(f.Limit, store.DefaultActivityListLimit)
	rows, err := a.s().pool.Query(ctx, `SELECT `+activityColumns+` FROM activity_entries `+q.where()+
		` ORDER BY created_at, id LIMIT `+limit, q.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list activity: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanActivity)
	if err != nil {
		return nil, fmt.Errorf("postgres: list activity: %w", err)
	}
	return emptyToNil(out), nil
}

// History implements store.ActivityBuffer.
func (a *activityBuffer) History(ctx context.Context, f store.ActivityFilter) ([]store.ActivityEntry, error) {
	if err := store.ValidateActivityFilter(f); err != nil {
		return nil, fmt.Errorf("postgres: activity history: %w", err)
	}
	q := activityQuery(f)
	limit := q.limit(f.Limit, store.DefaultActivityListLimit)
	rows, err := a.s().pool.Query(ctx, `SELECT `+activityHistoryColumns+` FROM activity_history `+q.where()+
		` ORDER BY id DESC LIMIT `+limit, q.args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: activity history: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanActivityHistory)
	if err != nil {
		return nil, fmt.Errorf("postgres: activity history: %w", err)
	}
	return emptyToNil(out), nil
}

// Purge implements store.ActivityBuffer.
func (a *activityBuffer) Purge(ctx context.Context, agentID string, taskIDs []string) (int, error) {
	if agentID == "" {
		return 0, fmt.Errorf("postgres: purge activity: %w: agent_id is required", store.ErrInvalidActivity)
	}
	if err := store.ValidateActivityKey(agentID, taskIDs...); err != nil {
		return 0, fmt.Errorf("postgres: purge activity of %s: %w", agentID, err)
	}
	if len(taskIDs) == 0 {
		return 0, ctx.Err()
	}
	tag, err := a.s().pool.Exec(ctx, `DELETE FROM activity_entries WHERE agent_id = $1 AND task_id = ANY($2::text[])`, agentID, taskIDs)
	if err != nil {
		return 0, fmt.Errorf("postgres: purge activity of %s: %w", agentID, err)
	}
	return int(tag.RowsAffected()), nil
}

// Usage implements store.ActivityBuffer.
func (a *activityBuffer) Usage(ctx context.Context, agentID string, lim store.ActivityLimits) (store.ActivityUsage, error) {
	u := store.ActivityUsage{Limits: lim.Effective()}
	if err := store.ValidateActivityKey(agentID); err != nil {
		return u, fmt.Errorf("postgres: activity usage of %s: %w", agentID, err)
	}
	if err := a.s().pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE agent_id = $1) FROM activity_entries`,
		agentID).Scan(&u.Active, &u.AgentActive); err != nil {
		return u, fmt.Errorf("postgres: activity usage of %s: %w", agentID, err)
	}
	return u, nil
}

// scanActivity reads activityColumns as an active entry.
func scanActivity(row pgx.CollectableRow) (store.ActivityEntry, error) {
	var (
		e            store.ActivityEntry
		waitingSince *time.Time
	)
	if err := row.Scan(&e.AgentID, &e.TaskID, &e.RepoID, &e.WorktreeID, &e.Branch, &e.Description,
		&e.WaitingOn, &waitingSince, &e.CreatedAt, &e.Scope, &e.JobKey, &e.HLC); err != nil {
		return store.ActivityEntry{}, err
	}
	e.Status = store.ActivityActive
	if waitingSince != nil {
		e.WaitingSince = waitingSince.UTC()
	}
	e.CreatedAt = utc(e.CreatedAt)
	return e, nil
}

// scanActivityHistory reads activityHistoryColumns.
func scanActivityHistory(row pgx.CollectableRow) (store.ActivityEntry, error) {
	var (
		e            store.ActivityEntry
		waitingSince *time.Time
		status       string
	)
	if err := row.Scan(&e.AgentID, &e.TaskID, &e.RepoID, &e.WorktreeID, &e.Branch, &e.Description,
		&e.WaitingOn, &waitingSince, &e.CreatedAt, &e.Scope, &e.JobKey, &e.HLC, &status, &e.CompletedAt); err != nil {
		return store.ActivityEntry{}, err
	}
	e.Status = store.ActivityStatus(status)
	if waitingSince != nil {
		e.WaitingSince = waitingSince.UTC()
	}
	e.CreatedAt = utc(e.CreatedAt)
	e.CompletedAt = utc(e.CompletedAt)
	return e, nil
}

func emptyToNil(es []store.ActivityEntry) []store.ActivityEntry {
	if len(es) == 0 {
		return nil
	}
	return es
}
