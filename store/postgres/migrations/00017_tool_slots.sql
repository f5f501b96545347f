-- +goose Up
-- The concurrency slots of tools whose descriptor sets max_concurrency (§18.1): one row per
-- call holding a slot, until its lease passes (a worker that died frees it so). Acquiring
-- takes a transaction-scoped advisory lock on the tool, so two calls never both take the
-- last slot.
CREATE TABLE tool_slots (
    provider_id text        NOT NULL,
    tool_name   text        NOT NULL,
    call_id     text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (provider_id, tool_name, call_id)
);

-- +goose Down
DROP TABLE tool_slots;
