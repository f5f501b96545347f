-- +goose Up
-- The worktree binding projection (§16): one row per agent, written by workflow
-- worktree/<agent_id> on every transition. A write whose updated_at is older than the
-- stored row's changes nothing, so a late retry cannot undo a later transition.
CREATE TABLE worktree_bindings (
    agent_id           text        PRIMARY KEY CHECK (agent_id <> ''),
    state              text        NOT NULL CHECK (state <> ''),
    repo_id            text        NOT NULL DEFAULT '',
    home_worktree_id   text        NOT NULL DEFAULT '',
    worktree_id        text        NOT NULL DEFAULT '',
    branch             text        NOT NULL DEFAULT '',
    path               text        NOT NULL DEFAULT '',
    target_worktree_id text        NOT NULL DEFAULT '',
    reason             text        NOT NULL DEFAULT '',
    note               text        NOT NULL DEFAULT '',
    expires_at         timestamptz,
    updated_at         timestamptz NOT NULL
);

-- Who works in a repository's worktree: the router's check and operators' listings.
CREATE INDEX worktree_bindings_repo_idx ON worktree_bindings (repo_id, worktree_id);

-- +goose Down
DROP TABLE worktree_bindings;
