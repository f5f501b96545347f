-- +goose Up
-- The transactional outbox (store.Outbox): signals and workflow starts that a store write
-- promised to Temporal, written in the write's transaction and deleted once Temporal took
-- them. lease_until is when a relay may (re)claim one: the writer's in-line attempt, a
-- relay's claim and each failed attempt's backoff all move it forward.
CREATE TABLE handoffs (
    id          text        PRIMARY KEY,
    seq         bigserial   NOT NULL,
    kind        text        NOT NULL,
    workflow_id text        NOT NULL,
    payload     bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL,
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text        NOT NULL DEFAULT ''
);
CREATE INDEX handoffs_due_idx ON handoffs (lease_until, seq);

-- +goose Down
DROP TABLE handoffs;
