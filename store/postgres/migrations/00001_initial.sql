-- +goose Up
-- The SW4RM store schema (store/store.go documents the semantics of every column's owner).

-- messages holds one row per admitted (or rejected-and-recorded) message_id. Every admission
-- writes a row, tracked or not, so the primary key doubles as the duplicate detector;
-- GetMessage/Advance only see rows with tracked = true. state and error_code hold
-- sw4rm.common.EnvelopeState / ErrorCode numbers.
CREATE TABLE messages (
    message_id     text        PRIMARY KEY,
    tracked        boolean     NOT NULL,
    producer_id    text        NOT NULL DEFAULT '',
    recipient_id   text        NOT NULL,
    correlation_id text        NOT NULL DEFAULT '',
    message_type   integer     NOT NULL DEFAULT 0,
    state          integer     NOT NULL,
    error_code     integer     NOT NULL DEFAULT 0,
    note           text        NOT NULL DEFAULT '',
    envelope       bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_correlation_idx ON messages (correlation_id) WHERE correlation_id <> '';
CREATE INDEX messages_recipient_state_idx ON messages (recipient_id, state) WHERE tracked;

-- deliveries is every agent's inbound buffer: a row is in the buffer while confirmed_at is
-- NULL. seq is global and increasing. leased_until is compared with the database clock so
-- every frontend agrees on when a lease expires.
CREATE TABLE deliveries (
    seq          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id     text        NOT NULL,
    message_id   text        NOT NULL,
    envelope     bytea       NOT NULL,
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    leased_until timestamptz,
    attempts     integer     NOT NULL DEFAULT 0,
    confirmed_at timestamptz
);
-- Claim, Depth and the capacity count only ever look at unconfirmed rows of one agent in seq
-- order; the partial index keeps that cheap however many confirmed rows pile up.
CREATE INDEX deliveries_pending_idx ON deliveries (agent_id, seq) WHERE confirmed_at IS NULL;
CREATE INDEX deliveries_message_idx ON deliveries (message_id);

-- agents is the registry projection (§14). descriptor is a serialized
-- sw4rm.registry.AgentDescriptor; state is a sw4rm.common.AgentState number.
CREATE TABLE agents (
    agent_id       text        PRIMARY KEY,
    descriptor     bytea       NOT NULL,
    state          integer     NOT NULL DEFAULT 0,
    health         jsonb,
    registered_at  timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz
);

-- audit_events is the append-only audit trail (§19).
CREATE TABLE audit_events (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time           timestamptz NOT NULL DEFAULT now(),
    correlation_id text        NOT NULL DEFAULT '',
    actor          text        NOT NULL DEFAULT '',
    type           text        NOT NULL,
    agent_id       text        NOT NULL DEFAULT '',
    message_id     text        NOT NULL DEFAULT '',
    -- json, not jsonb: validated like jsonb but kept byte for byte, so Details round-trips.
    details        json
);
CREATE INDEX audit_events_correlation_idx ON audit_events (correlation_id, id) WHERE correlation_id <> '';
CREATE INDEX audit_events_agent_idx ON audit_events (agent_id, id) WHERE agent_id <> '';
CREATE INDEX audit_events_message_idx ON audit_events (message_id, id) WHERE message_id <> '';
CREATE INDEX audit_events_type_idx ON audit_events (type text_pattern_ops, id);
CREATE INDEX audit_events_time_idx ON audit_events (time);

-- artifacts holds versioned negotiation artifacts; id gives insertion order.
CREATE TABLE artifacts (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    negotiation_id text        NOT NULL,
    kind           text        NOT NULL,
    version        text        NOT NULL,
    content_type   text        NOT NULL DEFAULT '',
    content        bytea,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT artifacts_negotiation_kind_version_key UNIQUE (negotiation_id, kind, version)
);

-- +goose Down
DROP TABLE artifacts;
DROP TABLE audit_events;
DROP TABLE agents;
DROP TABLE deliveries;
DROP TABLE messages;
