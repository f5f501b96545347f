-- +goose Up
-- activity_entries is the active Activity Buffer (§10): one row per in-flight task of an
-- agent, created before the task executes and removed when it completes (the row moves to
-- activity_history) or when the Scheduler purges it. The limits of §10.1 (active entries in
-- total and per agent) are enforced by Put under a transaction-level advisory lock, not by
-- the schema. waiting_on is what the task waits for while its agent is WAITING (004 §6), ''
-- when not waiting, and waiting_since when that started.
CREATE TABLE activity_entries (
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    agent_id      text        NOT NULL,
    task_id       text        NOT NULL,
    repo_id       text        NOT NULL DEFAULT '',
    worktree_id   text        NOT NULL DEFAULT '',
    branch        text        NOT NULL DEFAULT '',
    description   text        NOT NULL DEFAULT '',
    waiting_on    text        NOT NULL DEFAULT '',
    waiting_since timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT activity_entries_pkey PRIMARY KEY (agent_id, task_id),
    CONSTRAINT activity_entries_id_key UNIQUE (id)
);
-- List orders by (created_at, id) and filters by agent (the primary key), repo, worktree or
-- task.
CREATE INDEX activity_entries_created_idx ON activity_entries (created_at, id);
CREATE INDEX activity_entries_repo_idx ON activity_entries (repo_id, created_at, id);
CREATE INDEX activity_entries_worktree_idx ON activity_entries (worktree_id, created_at, id);
CREATE INDEX activity_entries_task_idx ON activity_entries (task_id);

-- activity_history keeps each agent's most recently completed or failed entries (§10.1
-- count-based eviction: Complete deletes all but the newest 50 of the agent, by id).
CREATE TABLE activity_history (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id      text        NOT NULL,
    task_id       text        NOT NULL,
    repo_id       text        NOT NULL DEFAULT '',
    worktree_id   text        NOT NULL DEFAULT '',
    branch        text        NOT NULL DEFAULT '',
    description   text        NOT NULL DEFAULT '',
    status        text        NOT NULL,
    waiting_on    text        NOT NULL DEFAULT '',
    waiting_since timestamptz,
    created_at    timestamptz NOT NULL,
    completed_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT activity_history_status_check CHECK (status IN ('completed', 'failed'))
);
CREATE INDEX activity_history_agent_idx ON activity_history (agent_id, id);

-- +goose Down
DROP TABLE activity_history;
DROP TABLE activity_entries;
