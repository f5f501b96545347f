-- +goose Up
-- Messaging model extensions: communication-class lanes (§7.3), message TTL (§11), the
-- idempotency cache (§11.1–§11.3), stream resumption (§5.5) and pending responses (004 §1–§2).

-- lane is the sw4rm.common.CommunicationClass number of the row (1 PRIVILEGED, 2 STANDARD,
-- 3 BULK; an unspecified class is stored as STANDARD). expires_at copies the message's TTL so
-- Claim can skip expired rows without reading messages. Both defaults are constants, so adding
-- the columns does not rewrite the table.
ALTER TABLE deliveries
    ADD COLUMN lane       smallint    NOT NULL DEFAULT 2,
    ADD COLUMN expires_at timestamptz;

-- Claim walks each lane of one agent in seq order over unconfirmed rows; the capacity count,
-- Depth, ResumeAfter and BufferStats use the agent_id prefix of the same index, which
-- replaces the (agent_id, seq) one so that an admission still maintains one partial index.
CREATE INDEX deliveries_claim_idx ON deliveries (agent_id, lane, seq) WHERE confirmed_at IS NULL;
DROP INDEX deliveries_pending_idx;

-- dedup_producer/dedup_key name the idempotency entry the message was admitted under ('' for
-- none); expires_at is its TTL (NULL: never).
ALTER TABLE messages
    ADD COLUMN expires_at     timestamptz,
    ADD COLUMN dedup_producer text NOT NULL DEFAULT '',
    ADD COLUMN dedup_key      text NOT NULL DEFAULT '';

-- Expire looks only at tracked messages still SENT, oldest first. The partial index holds
-- just the in-flight messages: a message leaves it with its first ACK.
CREATE INDEX messages_sent_idx ON messages (created_at, message_id COLLATE "C") WHERE tracked AND state = 1;

-- idempotency_entries is the idempotency cache (store.IdempotencyEntry), one row per logical
-- operation of a producer. Admit locks the row (INSERT ... ON CONFLICT DO UPDATE) to decide
-- admissions with the same key one at a time. terminal_state and error_code hold
-- sw4rm.common.EnvelopeState / ErrorCode numbers.
CREATE TABLE idempotency_entries (
    producer_id         text        NOT NULL,
    key                 text        NOT NULL,
    status              text        NOT NULL,
    original_message_id text        NOT NULL,
    latest_message_id   text        NOT NULL,
    attempts            integer     NOT NULL DEFAULT 1,
    terminal_state      integer     NOT NULL DEFAULT 0,
    error_code          integer     NOT NULL DEFAULT 0,
    result              text        NOT NULL DEFAULT '',
    cached_at           timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (producer_id, key),
    CONSTRAINT idempotency_entries_status_check CHECK (status IN ('in_progress', 'retrying', 'terminal'))
);

-- resume_horizons remembers, per agent, the highest delivery seq that Prune deleted: a resume
-- offset below it asks for rows that no longer exist (§5.5).
CREATE TABLE resume_horizons (
    agent_id text   PRIMARY KEY,
    horizon  bigint NOT NULL
);

-- pending_responses tracks requests that require a response (004 §1–§2). Only pending
-- requests are kept: resolving or expiring one deletes its row and hands it to exactly that
-- caller, so settled requests never accumulate. timeout_us is the per-attempt timeout.
CREATE TABLE pending_responses (
    request_message_id  text        PRIMARY KEY,
    original_message_id text        NOT NULL,
    producer_id         text        NOT NULL DEFAULT '',
    responder_id        text        NOT NULL DEFAULT '',
    correlation_id      text        NOT NULL DEFAULT '',
    attempt             integer     NOT NULL DEFAULT 1,
    max_attempts        integer     NOT NULL DEFAULT 0,
    timeout_us          bigint      NOT NULL DEFAULT 0,
    deadline            timestamptz NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now()
);
-- ExpirePendingResponses takes the most overdue first; PendingResponses lists a producer's.
CREATE INDEX pending_responses_deadline_idx ON pending_responses (deadline, request_message_id COLLATE "C");
CREATE INDEX pending_responses_producer_idx ON pending_responses (producer_id, deadline, request_message_id COLLATE "C");

-- +goose Down
DROP TABLE pending_responses;
DROP TABLE resume_horizons;
DROP TABLE idempotency_entries;
DROP INDEX messages_sent_idx;
ALTER TABLE messages
    DROP COLUMN dedup_key,
    DROP COLUMN dedup_producer,
    DROP COLUMN expires_at;
CREATE INDEX deliveries_pending_idx ON deliveries (agent_id, seq) WHERE confirmed_at IS NULL;
DROP INDEX deliveries_claim_idx;
ALTER TABLE deliveries
    DROP COLUMN expires_at,
    DROP COLUMN lane;
